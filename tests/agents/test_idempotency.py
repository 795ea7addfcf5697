"""Retries run once: a send repeated with the same Idempotency-Key gets the
first send's turn, never a second turn."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agents.models import Block, Turn
from agents.sending import turn_slot
from billing import ledger
from billing.models import Account, CostLine

from ..conftest import UNTIL_CANCELLED, client_for, error_of, script, wait_for


def post(api, body: dict, key: str | None = None, name: str = "dm"):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return api.post(f"/api/v1/agents/{name}/messages", body, format="json", **headers)


def test_a_repeated_send_returns_the_first_turn_and_runs_nothing_more(api, agent, game):
    first = post(api, {"content": "I open the chapel door."}, key="msg-1")
    balance = Account.objects.get(game=game).balance

    again = post(api, {"content": "I open the chapel door."}, key="msg-1")

    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json() == first.json()
    assert Turn.objects.count() == 1 and Block.objects.count() == 1
    assert CostLine.objects.filter(kind="model").count() == 1
    assert Account.objects.get(game=game).balance == balance


def test_the_same_key_with_another_message_is_422(api, agent):
    post(api, {"content": "I open the chapel door."}, key="msg-1")

    response = post(api, {"content": "I close the chapel door."}, key="msg-1")
    transient = post(api, {"content": "I open the chapel door.", "transient": True}, key="msg-1")

    assert (response.status_code, transient.status_code) == (422, 422)
    assert error_of(response)["code"] == "idempotency_mismatch"
    assert Turn.objects.count() == 1


def test_keys_are_per_agent(api, define):
    define("dm")
    define("npc")

    one = post(api, {"content": "hello"}, key="msg-1", name="dm")
    two = post(api, {"content": "hello"}, key="msg-1", name="npc")

    assert one.json()["turn"]["id"] != two.json()["turn"]["id"]


def test_sends_without_a_key_each_run(api, agent):
    post(api, {"content": "hello"})
    post(api, {"content": "hello"})

    assert Turn.objects.count() == 2


def test_a_key_over_a_day_old_starts_a_new_turn(api, agent):
    first = post(api, {"content": "hello"}, key="msg-1").json()["turn"]
    Turn.objects.update(created_at=timezone.now() - timedelta(hours=25))

    again = post(api, {"content": "hello"}, key="msg-1")

    assert again.status_code == 200
    assert again.json()["turn"]["id"] != first["id"]
    assert Turn.objects.count() == 2


@pytest.mark.parametrize("key", ["", "k" * 201])
def test_a_key_that_is_empty_or_too_long_is_400(api, agent, key):
    response = post(api, {"content": "hello"}, key=key)

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_idempotency_key"
    assert not Turn.objects.exists()


def test_a_send_refused_for_credits_can_be_retried_with_its_key(api, agent, game):
    Account.objects.filter(game=game).update(balance=0)
    refused = post(api, {"content": "hello"}, key="msg-1")
    ledger.adjustment_post(game=game, amount="5.000000", reason="top-up", made_by="boss")

    again = post(api, {"content": "hello"}, key="msg-1")

    assert refused.status_code == 402
    assert again.status_code == 200 and again.json()["turn"]["status"] == "completed"


@pytest.mark.django_db(transaction=True)
def test_a_repeat_while_the_first_still_runs_waits_for_it_and_returns_it(designer_key, agent):
    body = {"content": script({"sleep": 0.5}, {"say": "once"})}
    results = {}

    def send(label):
        results[label] = post(client_for(designer_key), body, key="msg-1")
        connection.close()

    first = threading.Thread(target=send, args=("first",))
    first.start()
    wait_for(lambda: Turn.objects.filter(status="running").exists())
    send("repeat")
    first.join(60)

    assert results["repeat"].status_code == 200
    assert results["repeat"].json() == results["first"].json()
    assert results["repeat"].json()["turn"]["reply"] == "once"
    assert Turn.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_repeats_arriving_at_once_make_one_turn(designer_key, agent, monkeypatch):
    # A repeat that joined just as its turn ended hears of the end: it does
    # not sit out its longest wait between looks, made here far longer than
    # the test waits for them all to end.
    monkeypatch.setattr(turn_slot, "FOLLOW_LOOK_SECONDS", 600.0)
    barrier = threading.Barrier(6)
    answers = []

    def send():
        barrier.wait()
        answers.append(post(client_for(designer_key), {"content": "hello"}, key="msg-1"))
        connection.close()

    threads = [threading.Thread(target=send, daemon=True) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not [thread for thread in threads if thread.is_alive()]

    # Past four requests following one turn, a repeat is told where to follow it (202).
    assert {a.status_code for a in answers} <= {200, 202}
    assert len({a.json()["turn"]["id"] for a in answers}) == 1
    assert Turn.objects.count() == 1 and CostLine.objects.filter(kind="model").count() == 1


@pytest.mark.django_db(transaction=True)
def test_past_four_followers_a_repeat_answers_at_once_with_where_to_follow_the_turn(designer_key, agent):
    api = client_for(designer_key)
    first = post(api, {"content": script(UNTIL_CANCELLED, {"say": "first"}), "wait": False}).json()["turn"]
    queued = post(api, {"content": "the repeated one", "wait": False}, key="K").json()["turn"]
    answers: list = []

    def repeat():
        answers.append(post(client_for(designer_key), {"content": "the repeated one"}, key="K"))
        connection.close()

    repeats = [threading.Thread(target=repeat) for _ in range(30)]
    for thread in repeats:
        thread.start()
    # The rest answered at once: while the turn ahead of the repeated one
    # still runs (until the test cancels it).
    wait_for(lambda: len(answers) == 26, timeout=60)

    assert Turn.objects.get(uuid=first["id"]).status == "running"
    assert {a.status_code for a in answers} == {202}
    location = f"/api/v1/agents/dm/turns/{queued['id']}"
    assert all(a.json()["turn"]["id"] == queued["id"] and a["Location"].endswith(location) for a in answers)
    assert Turn.objects.get(uuid=queued["id"]).followers == 4
    assert api.post(f"/api/v1/agents/dm/turns/{first['id']}/cancel").status_code in (200, 202)
    for thread in repeats:
        thread.join(60)
    followed = [a for a in answers[26:]]
    assert [a.status_code for a in followed] == [200] * 4
    assert all(a.json()["turn"]["status"] == "completed" for a in followed)
    assert Turn.objects.count() == 2 and Turn.objects.get(uuid=queued["id"]).followers == 0


@pytest.mark.django_db(transaction=True)
def test_followers_count_against_the_agents_queue(designer_key, agent, studio_conf):
    studio_conf(MAX_QUEUED_SENDS=2)
    api = client_for(designer_key)
    first = post(api, {"content": script(UNTIL_CANCELLED, {"say": "first"}), "wait": False}).json()["turn"]
    post(api, {"content": "queued", "wait": False}, key="K")  # one queued
    follower = threading.Thread(
        target=lambda: (post(client_for(designer_key), {"content": "queued"}, key="K"), connection.close())
    )
    follower.start()
    wait_for(lambda: Turn.objects.filter(followers=1).exists())  # and one following

    new = post(api, {"content": "a new one"})
    another_follower = post(api, {"content": "queued"}, key="K")

    assert (new.status_code, error_of(new)["code"]) == (429, "agent_busy")
    assert (another_follower.status_code, error_of(another_follower)["code"]) == (429, "agent_busy")
    assert api.post(f"/api/v1/agents/dm/turns/{first['id']}/cancel").status_code in (200, 202)
    follower.join(60)
    assert not follower.is_alive()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow  # heavy by design: a six-second turn, followed; left out of `make test-fast` (#38)
def test_a_follower_looks_at_the_database_only_when_a_turn_of_the_agent_ends(
    designer_key, agent, monkeypatch
):
    from django.db.backends import utils

    statements: list[str] = []
    execute = utils.CursorWrapper.execute

    def counted(self, sql, params=None):
        if threading.current_thread().name == "follower":
            statements.append(sql)
        return execute(self, sql, params)

    monkeypatch.setattr(utils.CursorWrapper, "execute", counted)
    api = client_for(designer_key)
    post(api, {"content": script({"sleep": 6}, {"say": "slow"}), "wait": False}, key="K")
    follower = threading.Thread(
        target=lambda: (
            post(client_for(designer_key), {"content": script({"sleep": 6}, {"say": "slow"})}, key="K"),
            connection.close(),
        ),
        name="follower",
    )
    follower.start()
    follower.join(60)

    # While it followed (from joining to leaving): a look when it was woken,
    # not a look every second for six seconds.
    joined = next(
        i for i, sql in enumerate(statements) if '"followers" = ("agents_turn"."followers" +' in sql
    )
    left = next(i for i, sql in enumerate(statements) if '"followers" = ("agents_turn"."followers" -' in sql)
    looks = [sql for sql in statements[joined + 1 : left] if sql.startswith('SELECT "agents_turn"')]
    assert len(looks) <= 3, len(looks)


def test_the_schema_documents_the_header_and_the_mismatch(api):
    schema = api.get("/api/v1/schema/?format=json").json()

    send = schema["paths"]["/api/v1/agents/{name}/messages"]["post"]
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in send["parameters"])
    assert "422" in send["responses"]
