"""A web process asked to stop (SIGTERM) drains: it stops taking new work,
lets what it runs finish within STUDIO_SHUTDOWN_GRACE_SECONDS, ends what is
left as `failed` with code `shutdown` (holds given back at once), and exits
without an ERROR line. Daphne as in production, on PostgreSQL and Redis."""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from django.conf import settings

from agents.models import Turn, TurnStatus
from agents.wire import turn_wire
from bench.launcher import Daphne
from billing import ledger
from billing.models import Account
from tests.support.web import start_web

from ..conftest import script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the production setup: Redis between processes"),
]


def post(base: str, key: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST")
    request.add_header("Authorization", f"Bearer {key}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def one_server(tmp_path, grace: int) -> Daphne:
    (server,), _ = start_web(tmp_path, 1, STUDIO_SHUTDOWN_GRACE_SECONDS=str(grace))
    return server


def stopped(server: Daphne, timeout: float) -> float:
    """SIGTERM, and how long the process took to exit."""
    started = time.monotonic()
    server.process.terminate()
    server.process.wait(timeout)
    return time.monotonic() - started


def log_of(server: Daphne) -> str:
    return server.log.read_text(errors="replace")


def test_a_stopping_process_lets_its_requests_and_background_turns_finish(tmp_path, designer_key, define):
    define("dm")
    define("npc")
    server = one_server(tmp_path, grace=20)
    background = post(
        server.url,
        designer_key,
        "/api/v1/agents/dm/messages",
        {"content": script({"sleep": 2}, {"say": "background"}), "wait": False},
    )
    assert background[0] == 202
    answers = {}
    in_flight = threading.Thread(
        target=lambda: answers.update(
            plain=post(
                server.url,
                designer_key,
                "/api/v1/agents/npc/messages",
                {"content": script({"sleep": 1.5}, {"say": "plain"})},
            )
        )
    )
    in_flight.start()
    wait_for(lambda: Turn.objects.filter(status=TurnStatus.RUNNING).count() == 2)

    took = stopped(server, timeout=15)
    in_flight.join(5)

    assert answers["plain"][0] == 200 and answers["plain"][1]["turn"]["reply"] == "plain"
    turn = turn_wire(Turn.objects.get(uuid=background[1]["turn"]["id"]))
    assert (turn["status"], turn["reply"]) == (TurnStatus.COMPLETED, "background")
    assert 1.0 < took < 10
    assert "ERROR" not in log_of(server) and "never retrieved" not in log_of(server), log_of(server)[-2000:]


def test_a_stopping_process_takes_no_new_work(tmp_path, designer_key, define):
    define("dm")
    server = one_server(tmp_path, grace=20)
    post(
        server.url,
        designer_key,
        "/api/v1/agents/dm/messages",
        {"content": script({"sleep": 3}, {"say": "slow"}), "wait": False},
    )
    wait_for(lambda: Turn.objects.filter(status=TurnStatus.RUNNING).exists())

    server.process.terminate()
    time.sleep(0.5)

    with pytest.raises(urllib.error.URLError):  # not listening any more
        urllib.request.urlopen(server.url + "/healthz", timeout=2)
    server.process.wait(15)


def test_turns_past_the_grace_end_failed_shutdown_and_give_their_holds_back(
    tmp_path, designer_key, define, game
):
    define("dm")
    server = one_server(tmp_path, grace=1)
    slow = post(
        server.url,
        designer_key,
        "/api/v1/agents/dm/messages",
        {"content": script({"sleep": 9}, {"say": "never"}), "wait": False},
    )
    answers = {}
    queued = threading.Thread(
        target=lambda: answers.update(
            queued=post(server.url, designer_key, "/api/v1/agents/dm/messages", {"content": "behind it"})
        )
    )
    queued.start()
    wait_for(lambda: Turn.objects.filter(status=TurnStatus.QUEUED).exists())

    took = stopped(server, timeout=15)
    queued.join(5)

    turn = Turn.objects.get(uuid=slow[1]["turn"]["id"])
    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "shutdown")
    assert answers["queued"][0] == 503 and answers["queued"][1]["error"]["code"] == "shutting_down"
    assert not Turn.objects.filter(status__in=[TurnStatus.QUEUED, TurnStatus.RUNNING]).exists()
    assert Account.objects.get(game=game).held == 0
    assert all(check.is_consistent for check in ledger.ledger_check())
    assert took < 8
    assert "never retrieved" not in log_of(server)
