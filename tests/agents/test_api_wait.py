"""`"wait": false` on a send: 202 at once with the turn and where to read it,
the send running on in the background; refusals still come at once."""

import time

import pytest
from django.db import connection

from agents.models import Turn
from billing.models import Account
from tests.support.database import database_sessions

from ..conftest import UNTIL_CANCELLED, error_of, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def send(api, content, *, wait=False, **headers):
    return api.post(
        "/api/v1/agents/dm/messages", {"content": content, "wait": wait}, format="json", **headers
    )


def read(api, response) -> dict:
    return api.get(response["Location"]).json()["turn"]


def ended(api, response) -> dict:
    """The turn at the answer's Location, once it has ended."""
    wait_for(lambda: read(api, response)["endedAt"] is not None)
    return read(api, response)


def test_it_answers_202_with_the_running_turn_and_where_to_read_it(api, agent):
    response = send(api, script({"sleep": 0.5}, {"say": "The gate opens."}))

    assert response.status_code == 202
    turn = response.json()["turn"]
    assert (turn["status"], turn["reply"], turn["toolCalls"]) == ("running", "", [])
    assert turn["cost"] == {"total": "0.000000", "lines": []}
    assert response["Location"] == f"http://testserver/api/v1/agents/dm/turns/{turn['id']}"
    done = ended(api, response)
    assert (done["id"], done["status"], done["reply"]) == (turn["id"], "completed", "The gate opens.")
    assert done["block"] == turn["block"] == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="counts PostgreSQL's sessions")
def test_a_send_behind_a_running_turn_is_queued_and_waits_holding_no_connection(api, agent):
    before = database_sessions()
    # The turn ahead runs until the test cancels it: the second waits meanwhile.
    first = send(api, script(UNTIL_CANCELLED, {"say": "first"}))
    second = send(api, "And then?")
    # Over a second: a waiter holds a connection only for the moment it looks.
    during = min(database_sessions() for _ in range(20) if not time.sleep(0.05))
    still = read(api, second)["status"]
    assert api.post(first["Location"] + "/cancel").status_code in (200, 202)

    assert second.status_code == 202
    assert second.json()["turn"]["status"] == "queued"
    assert still == "queued"  # it waited throughout
    assert during <= before + 1  # the running turn's, at most
    assert ended(api, first)["status"] == "cancelled"
    assert ended(api, second)["reply"] == 'You said: "And then?"'


def test_a_repeat_under_its_idempotency_key_answers_the_same_turn(api, agent):
    headers = {"HTTP_IDEMPOTENCY_KEY": "msg-1"}
    first = send(api, script({"sleep": 0.5}, {"say": "once"}), **headers)
    again = send(api, script({"sleep": 0.5}, {"say": "once"}), **headers)

    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["turn"]["id"] == first.json()["turn"]["id"]
    assert again["Location"] == first["Location"]
    assert ended(api, again)["reply"] == "once"
    assert Turn.objects.filter(agent=agent).count() == 1


def test_refusals_still_come_at_once_with_their_codes(api, define, game, studio_conf):
    define("dm", max_tokens=1000, max_open_tokens=100)
    studio_conf(MAX_QUEUED_SENDS=0)

    empty = send(api, "   ")
    too_large = send(api, "word " * 2000)
    running = send(api, script({"sleep": 1}, {"say": "busy"}))
    busy = send(api, "me too")
    ended(api, running)
    Account.objects.filter(game=game).update(balance=0)
    broke = send(api, "hello")

    assert (empty.status_code, error_of(empty)["code"]) == (400, "invalid_request")
    assert (too_large.status_code, error_of(too_large)["code"]) == (413, "context_too_large")
    assert (busy.status_code, error_of(busy)["code"]) == (429, "agent_busy")
    assert int(busy["Retry-After"]) >= 1
    assert (broke.status_code, error_of(broke)["code"]) == (402, "budget_exhausted")
    assert Turn.objects.count() == 1


def test_wait_must_be_a_boolean(api, agent):
    response = send(api, "hello", wait="later")

    assert response.status_code == 400
    assert "wait" in error_of(response)["message"]
