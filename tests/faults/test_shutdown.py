"""A web process asked to stop (SIGTERM) drains: it stops taking new work,
lets what it runs finish within STUDIO_SHUTDOWN_GRACE_SECONDS, ends what is
left as `failed` with code `shutdown` (holds given back at once), and exits
without an ERROR line. Daphne as in production, on PostgreSQL and Redis."""

import json
import threading
import urllib.error
import urllib.request

import pytest
from django.conf import settings
from django.utils import timezone

from agents.models import Turn, TurnStatus
from agents.wire import turn_wire
from bench.launcher import Daphne
from billing import ledger
from billing.models import Account
from tests.support.web import start_web

from ..conftest import UNTIL_CANCELLED, script, wait_for

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


# How long a test waits for a stopped process to exit: far past what its
# work takes, however loaded the machine, and short of the grace (or of the
# turn) a process that failed to drain would wait out.
EXIT_WAIT_SECONDS = 120


def stopped(server: Daphne) -> int:
    """SIGTERM, then the process's exit code once it exits."""
    server.process.terminate()
    return server.process.wait(EXIT_WAIT_SECONDS)


def listening(server: Daphne) -> bool:
    """Whether the process answers a request. A connection refused, or one
    a stopping process drops unanswered (accepted in its backlog as it
    closed its socket, then reset), is no answer."""
    try:
        urllib.request.urlopen(server.url + "/healthz", timeout=30).close()
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, ConnectionError):
        return False
    return True


def log_of(server: Daphne) -> str:
    return server.log.read_text(errors="replace")


def test_a_stopping_process_lets_its_requests_and_background_turns_finish(tmp_path, designer_key, define):
    define("dm")
    define("npc")
    # A grace far longer than the test may wait for the process to exit: it
    # exits once its work is done, not when the grace is over.
    server = one_server(tmp_path, grace=EXIT_WAIT_SECONDS * 5)
    background = post(
        server.url,
        designer_key,
        "/api/v1/agents/dm/messages",
        {"content": script({"sleep": 8}, {"say": "background"}), "wait": False},
    )
    assert background[0] == 202
    answers = {}
    in_flight = threading.Thread(
        target=lambda: answers.update(
            plain=post(
                server.url,
                designer_key,
                "/api/v1/agents/npc/messages",
                {"content": script({"sleep": 6}, {"say": "plain"})},
            )
        )
    )
    in_flight.start()
    wait_for(lambda: Turn.objects.filter(status=TurnStatus.RUNNING).count() == 2)

    asked_to_stop = timezone.now()
    exit_code = stopped(server)
    in_flight.join(EXIT_WAIT_SECONDS)

    assert exit_code == 0
    assert answers["plain"][0] == 200 and answers["plain"][1]["turn"]["reply"] == "plain"
    turn = turn_wire(Turn.objects.get(uuid=background[1]["turn"]["id"]))
    assert (turn["status"], turn["reply"]) == (TurnStatus.COMPLETED, "background")
    # Both were still running when the process was asked to stop.
    assert all(ended > asked_to_stop for ended in Turn.objects.values_list("ended_at", flat=True))
    assert "ERROR" not in log_of(server) and "never retrieved" not in log_of(server), log_of(server)[-2000:]


def test_a_stopping_process_takes_no_new_work(tmp_path, designer_key, define):
    define("dm")
    server = one_server(tmp_path, grace=EXIT_WAIT_SECONDS * 5)
    post(
        server.url,
        designer_key,
        "/api/v1/agents/dm/messages",
        {"content": script({"sleep": 15}, {"say": "slow"}), "wait": False},
    )
    wait_for(lambda: Turn.objects.filter(status=TurnStatus.RUNNING).exists())
    assert listening(server)

    server.process.terminate()

    # It stops listening while it still runs the turn.
    wait_for(lambda: not listening(server), timeout=EXIT_WAIT_SECONDS)
    assert server.process.poll() is None
    assert Turn.objects.get().status == TurnStatus.RUNNING
    assert server.process.wait(EXIT_WAIT_SECONDS) == 0
    assert Turn.objects.get().status == TurnStatus.COMPLETED


def test_turns_past_the_grace_end_failed_shutdown_and_give_their_holds_back(
    tmp_path, designer_key, define, game
):
    define("dm")
    server = one_server(tmp_path, grace=1)
    slow = post(
        server.url,
        designer_key,
        "/api/v1/agents/dm/messages",
        # It would run far longer than the test waits for the process to exit.
        {"content": script(UNTIL_CANCELLED, {"say": "never"}), "wait": False},
    )
    answers = {}
    queued = threading.Thread(
        target=lambda: answers.update(
            queued=post(server.url, designer_key, "/api/v1/agents/dm/messages", {"content": "behind it"})
        )
    )
    queued.start()
    wait_for(lambda: Turn.objects.filter(status=TurnStatus.QUEUED).exists())

    exit_code = stopped(server)
    queued.join(EXIT_WAIT_SECONDS)

    turn = Turn.objects.get(uuid=slow[1]["turn"]["id"])
    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "shutdown")
    assert answers["queued"][0] == 503 and answers["queued"][1]["error"]["code"] == "shutting_down"
    assert not Turn.objects.filter(status__in=[TurnStatus.QUEUED, TurnStatus.RUNNING]).exists()
    assert Account.objects.get(game=game).held == 0
    assert all(check.is_consistent for check in ledger.ledger_check())
    assert exit_code == 0
    assert "never retrieved" not in log_of(server)
