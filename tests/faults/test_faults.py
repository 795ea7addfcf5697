"""Faults, against a real studio server process: Redis restarted mid-run,
a client that hangs up mid-turn, the database dropping its connections.
Each time: nothing lost, nothing charged twice, state consistent after."""

import json
import os
import signal
import socket
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone
from websockets.sync.client import connect as ws_connect

from agents.models import Block, Turn, TurnStatus
from bench.launcher import Daphne
from billing import ledger
from billing.models import Account
from tests.support.api import request
from tests.support.database import database_url_of_this_test_run
from tests.support.redis_server import redis_running

from ..conftest import script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="drops PostgreSQL connections"),
]


@pytest.fixture
def redis(tmp_path):
    with redis_running(tmp_path) as server:
        yield server


@pytest.fixture
def studio(redis, tmp_path):
    """A studio server (Daphne) on the test database and the private Redis."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_this_test_run(),
        "REDIS_URL": f"redis://127.0.0.1:{redis.port}/0",
        "STUDIO_CHANNEL_PREFIX": "faults",
        "STUDIO_COMPACTION_RUNNER": "none",
        "STUDIO_TURN_LEASE_SECONDS": "2",
        "STUDIO_WS_REJOIN_SECONDS": "0.5",
    }
    server = Daphne(env, tmp_path / "server.log").wait_ready()
    yield server.url
    server.stop()


def send(url, key, content, name="dm"):
    return request("POST", f"{url}/api/v1/agents/{name}/messages", key, {"content": content})


def assert_consistent(game):
    account = Account.objects.get(game=game)
    assert account.held == 0
    assert all(check.is_consistent for check in ledger.ledger_check())
    assert not Turn.objects.filter(status__in=[TurnStatus.QUEUED, TurnStatus.RUNNING]).exists()


def listen_for_finish(url, key, timeout=60) -> bool:
    """Connect (again) and wait for one turn.finished."""
    url = url.replace("http", "ws") + "/ws/v1/agents/dm/events"
    with ws_connect(url, subprotocols=["studio.v1", f"bearer.{key}"], open_timeout=timeout) as ws:
        assert json.loads(ws.recv(timeout=timeout))["type"] == "hello"
        ready.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if json.loads(ws.recv(timeout=timeout))["type"] == "turn.finished":
                return True
    return False


ready = threading.Event()


def readiness(url) -> tuple[int, dict]:
    return request("GET", f"{url}/readyz", "")


def test_redis_restarted_mid_run_loses_no_turn_and_events_come_back(
    studio, redis, define, designer_key, game
):
    define("dm")
    assert send(studio, designer_key, "before")[0] == 200
    assert readiness(studio) == (200, {"status": "ok", "degraded": False})

    redis.stop()
    during = send(studio, designer_key, "while Redis is down")
    # Sends are served without Redis: the process stays in the balancer's
    # pool (once the answer readiness keeps for a second has gone).
    degraded = (200, {"status": "degraded", "degraded": True})
    wait_for(lambda: readiness(studio) == degraded)
    redis.start()
    wait_for(lambda: readiness(studio) == (200, {"status": "ok", "degraded": False}))
    ready.clear()
    heard = {}
    listener = threading.Thread(
        target=lambda: heard.setdefault("ok", listen_for_finish(studio, designer_key))
    )
    listener.start()
    assert ready.wait(60)
    after = send(studio, designer_key, "after")
    listener.join(120)

    assert during[0] == 200 and during[1]["turn"]["status"] == "completed"
    assert after[0] == 200
    assert heard.get("ok") is True
    assert [b.entries[0]["content"] for b in Block.objects.order_by("number")] == [
        "before",
        "while Redis is down",
        "after",
    ]
    assert_consistent(game)


def test_a_client_that_hangs_up_mid_turn_loses_nothing(studio, define, designer_key, game):
    agent = define("dm")
    # Long enough that it still runs when the client hangs up.
    body = json.dumps({"content": script({"sleep": 5}, {"say": "finished anyway"})}).encode()
    port = int(studio.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(
            b"POST /api/v1/agents/dm/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {designer_key}\r\nContent-Type: application/json\r\n".encode()
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    # The client is gone; the turn runs to its end all the same.
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.COMPLETED).exists())

    assert Block.objects.get(agent=agent, number=1).entries[-1]["content"] == "finished anyway"
    assert send(studio, designer_key, "still here")[0] == 200
    assert_consistent(game)


def ended_or_lapsed(turn: Turn) -> bool:
    """Whether the turn has ended, or its lease lapsed (its process lost it)."""
    return turn.status not in (TurnStatus.QUEUED, TurnStatus.RUNNING) or (
        turn.lease_until is not None and turn.lease_until < timezone.now()
    )


def _drop_server_connections():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def test_the_database_dropping_connections_mid_turn_is_recovered(studio, define, designer_key, game):
    agent = define("dm")
    outcome = {}
    slow = threading.Thread(
        target=lambda: outcome.setdefault(
            "r", send(studio, designer_key, script({"sleep": 1.5}, {"say": "x"}))
        )
    )
    slow.start()
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    _drop_server_connections()
    slow.join(60)
    wait_for(lambda: ended_or_lapsed(Turn.objects.filter(agent=agent).order_by("id").first()))
    after = send(studio, designer_key, "after the outage")

    status, body = outcome["r"]
    assert status in (200, 503)
    if status == 503:
        assert body["error"]["code"] == "unavailable"
    assert after[0] == 200 and after[1]["turn"]["status"] == "completed"
    first = Turn.objects.filter(agent=agent).order_by("id").first()
    assert first.status in (TurnStatus.COMPLETED, TurnStatus.FAILED)
    if first.status == TurnStatus.FAILED:  # its process never stopped: the database is why
        assert first.error_code == "database_unavailable", first.error
    assert list(Block.objects.filter(agent=agent).values_list("number", flat=True)) == [1, 2]
    assert_consistent(game)


def test_a_redis_that_stops_answering_leaves_sends_their_database_connections(
    redis, tmp_path, define, designer_key, game
):
    """Every send touches Redis (its rate window, its events, the wake-ups)
    while it holds a pooled database connection. A Redis that accepts but
    never answers (stopped, or cut off by the network) must cost a send a
    bounded wait, not a long run of retries: otherwise a burst of sends
    holds the pool and the rest are refused 503, the database being fine."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_this_test_run(),
        "REDIS_URL": f"redis://127.0.0.1:{redis.port}/0",
        "STUDIO_CHANNEL_PREFIX": "faults",
        "STUDIO_COMPACTION_RUNNER": "none",
        "STUDIO_DB_POOL": "1",
        "STUDIO_DB_POOL_MAX": "2",
        "STUDIO_DB_POOL_TIMEOUT": "5",
    }
    names = [f"npc{n}" for n in range(6)]
    for name in names:
        define(name)
    server = Daphne(env, tmp_path / "server.log").wait_ready()
    answers: dict = {}
    try:
        assert send(server.url, designer_key, "before", names[0])[0] == 200
        redis.process.send_signal(signal.SIGSTOP)
        burst = [
            threading.Thread(
                target=lambda n=n: answers.setdefault(n, send(server.url, designer_key, "hi", n))
            )
            for n in names
        ]
        for thread in burst:
            thread.start()
        for thread in burst:
            thread.join(60)
    finally:
        redis.process.send_signal(signal.SIGCONT)
        server.stop()

    assert sorted(status for status, _ in answers.values()) == [200] * len(names), answers
    assert_consistent(game)
