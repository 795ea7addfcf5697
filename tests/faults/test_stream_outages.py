"""Server-sent event streams while Redis or PostgreSQL goes away, against a
real Daphne process on a Redis (and, where it is stopped, a PostgreSQL) of
the test's own: a stream keeps its keep-alives and ends with the turn's
`turn.finished` as long as it can learn how the turn ended, and ends with
an `error` event (`stream_interrupted`) once it cannot — never silently
held open."""

import json
import os
import threading

import httpx2
import pytest
from django.db import connection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from bench.launcher import Daphne
from tests.support.database import database_url_of_this_test_run
from tests.support.redis_server import redis_running

from ..conftest import UNTIL_CANCELLED, call, script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a real PostgreSQL behind a real server"),
]

GIVE = {
    "name": "give_item",
    "description": "Hand the player an item.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}},
}
DM = "/api/v1/agents/dm"


@pytest.fixture
def redis(tmp_path):
    with redis_running(tmp_path) as server:
        yield server


@pytest.fixture
def studio(redis, tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_this_test_run(),
        "REDIS_URL": f"redis://127.0.0.1:{redis.port}/0",
        "STUDIO_CHANNEL_PREFIX": "streams",
        "STUDIO_COMPACTION_RUNNER": "none",
    }
    server = Daphne(env, tmp_path / "server.log").wait_ready()
    yield server
    server.stop()


@pytest.fixture
def http(studio, designer_key):
    with httpx2.Client(
        base_url=studio.url, headers={"Authorization": f"Bearer {designer_key}"}, timeout=60
    ) as client:
        yield client


class Follower:
    """A stream read in a thread of its own: its events, as they come."""

    def __init__(self, http, method, path, **kwargs):
        self.events: list[tuple[str, dict]] = []
        self.ended = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._read, args=(http, method, path), kwargs=kwargs)
        self.thread.start()

    def _read(self, http, method, path, **kwargs):
        try:
            with http.stream(method, path, **kwargs) as response:
                for sse in httpx2.EventSource(response):
                    self.events.append((sse.event, sse.json()))
        except Exception as error:  # a hang ends as a read time-out: the test reads it
            self.error = error
        finally:
            self.ended.set()

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def saw(self, name: str) -> bool:
        return name in self.names()

    def finish(self, timeout=60) -> list[str]:
        self.thread.join(timeout)
        assert self.ended.is_set(), "the stream is still open"
        assert self.error is None, repr(self.error)
        return self.names()


def test_a_followed_turn_that_ends_while_redis_is_down_ends_its_stream_with_turn_finished(
    http, redis, define, designer_key
):
    define("dm", tools=(GIVE,))
    started = http.post(
        f"{DM}/messages", json={"content": script(call("give_item", item="key")), "wait": False}
    ).json()["turn"]
    follower = Follower(http, "GET", f"{DM}/turns/{started['id']}/events")
    wait_for(lambda: follower.saw("tool.requested"), timeout=30)
    call_id = follower.events[-1][1]["callId"]

    redis.stop()
    answered = http.post(
        f"{DM}/turns/{started['id']}/tool-results", json={"callId": call_id, "result": "given"}
    )
    names = follower.finish()

    assert answered.status_code == 200
    assert names[-1] == "turn.finished"
    assert follower.events[-1][1]["turn"]["status"] == "completed"


def test_a_streamed_send_whose_turn_ends_while_redis_is_down_ends_with_turn_finished(
    http, redis, define, designer_key
):
    define("dm")
    follower = Follower(
        http, "POST", f"{DM}/messages", json={"content": script(UNTIL_CANCELLED), "stream": True}
    )
    wait_for(lambda: follower.saw("turn.started"), timeout=30)
    turn_id = follower.events[0][1]["turnId"]

    redis.stop()
    cancelled = http.post(f"{DM}/turns/{turn_id}/cancel")
    names = follower.finish()

    assert cancelled.status_code == 202
    assert names[-1] == "turn.finished"
    assert follower.events[-1][1]["turn"]["status"] == "cancelled"


def refused_while_away(url: str, key: str) -> tuple[dict, int]:
    """Open the agent's events socket; the event it is sent, and its close code
    (Daphne passes on no close reason)."""
    url = url.replace("http", "ws") + "/ws/v1/agents/dm/events"
    with ws_connect(url, subprotocols=["studio.v1", f"bearer.{key}"], open_timeout=10) as ws:
        event = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    return event, closed.value.rcvd.code


def test_a_websocket_opened_while_redis_is_down_is_closed_4503_saying_why(
    studio, redis, define, designer_key
):
    define("dm")
    redis.stop()

    event, code = refused_while_away(studio.url, designer_key)

    assert event["type"] == "error" and event["code"] == "unavailable"
    assert "since" in event["message"]
    assert code == 4503
