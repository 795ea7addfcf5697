"""A background turn's events reach listeners as they happen, on the
embedded default (one process, the in-memory channel layer) and on Redis:
a `wait: false` send runs in a thread of its own, and what it publishes
must wake the server's event loop, not wait for something else to."""

import json

import httpx2
import pytest
from websockets.sync.client import connect as ws_connect

from agents.models import Turn
from tests.support.api import call_api
from tests.support.web import start_web, stop_web

from ..conftest import script

# Each test starts a web process of its own (`server`).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

WORDS = "Six words written a while apart."
PAUSE = 1.0  # the model's pause before each word


@pytest.fixture(params=["redis", "in-memory"])
def server(request, tmp_path):
    env = {} if request.param == "redis" else {"REDIS_URL": ""}
    processes, urls = start_web(tmp_path, 1, **env)
    yield urls[0]
    stop_web(processes)


def background_send(url: str, key: str) -> str:
    status, body = call_api(
        url,
        key,
        "POST",
        "/agents/dm/messages",
        {"content": script({"say": WORDS, "sleep": PAUSE}), "wait": False},
    )
    assert status == 202, body
    return body["turn"]["id"]


def running(turn: str) -> bool:
    return Turn.objects.get(uuid=turn).ended_at is None


def assert_heard_one_by_one(while_running: list[bool]) -> None:
    """Each word heard on its own (a delta each), and the first ones while
    the turn still runs, seconds before its end: a listener fed only when
    something else wakes the server's loop hears them all at the end (a
    word's seconds apart, so no loaded machine delays the first three past
    the last)."""
    assert len(while_running) == len(WORDS.split()), while_running
    assert all(while_running[:3]), while_running


def test_a_background_turns_words_reach_a_websocket_listener_as_they_are_written(
    server, define, designer_key
):
    define("dm")
    url = server.replace("http", "ws") + "/ws/v1/agents/dm/events"
    with ws_connect(url, subprotocols=["studio.v1", f"bearer.{designer_key}"], open_timeout=60) as socket:
        assert json.loads(socket.recv(timeout=60))["type"] == "hello"
        turn = background_send(server, designer_key)
        heard = []
        while (event := json.loads(socket.recv(timeout=60)))["type"] != "turn.finished":
            if event["type"] == "reply.delta":
                heard.append(running(turn))

    assert_heard_one_by_one(heard)


def test_a_background_turns_words_reach_its_event_stream_as_they_are_written(server, define, designer_key):
    define("dm")
    turn = background_send(server, designer_key)
    heard = []
    headers = {"Authorization": f"Bearer {designer_key}"}
    with httpx2.stream(
        "GET", f"{server}/api/v1/agents/dm/turns/{turn}/events", headers=headers, timeout=60
    ) as answer:
        for line in answer.iter_lines():
            if line.startswith("event: reply.delta"):
                heard.append(running(turn))

    assert_heard_one_by_one(heard)
