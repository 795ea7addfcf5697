"""A turn's events over HTTP, from a real Daphne server, read as a game
server would: with a streaming HTTP client and its server-sent events
parser (httpx2's). And the WebSocket handshake with the key as a
subprotocol, as a real server answers it."""

import json
import threading

import httpx2
import pytest
from django.conf import settings
from websockets.sync.client import connect as ws_connect

from studio.live.events import agent_events_buffer
from tests.support.live import QUEST, QUEST_EVENTS

from ..conftest import UNTIL_CANCELLED, script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("event_buffers_cleared"),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) between the processes"),
]


def follow(http, turn_id, until=None):
    """The turn's server-sent events as (name, id, data), and the answer's headers."""
    events = []
    with http.sse(f"/api/v1/agents/dm/turns/{turn_id}/events") as source:
        for sse in source:
            events.append((sse.event, sse.id, sse.json()))
            if until and until(events):
                break
        return events, source.response


def test_a_turn_that_has_ended_streams_its_events_and_ends_with_the_turn_a_send_answers(agent, http):
    sent = http.post("/api/v1/agents/dm/messages", json={"content": script(QUEST, {"say": "Done."})})
    turn = sent.json()["turn"]
    # The answer can come before the server's publisher has stamped the turn's first event.
    wait_for(lambda: (agent_events_buffer(agent.pk)[1] or [{}])[-1].get("type") == "turn.finished")

    events, response = follow(http, turn["id"])

    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache" and response.headers["x-accel-buffering"] == "no"
    assert [name for name, _, _ in events] == QUEST_EVENTS
    ids = [int(id_) for _, id_, _ in events]
    assert ids == sorted(set(ids))
    assert [data["seq"] for _, _, data in events] == ids
    assert events[2][2]["name"] == "close_memory" and events[2][2]["turnId"] == turn["id"]
    assert {"turn": events[-1][2]["turn"]} == http.get(f"/api/v1/agents/dm/turns/{turn['id']}").json()
    assert events[-1][2]["turn"] == turn


def test_a_running_turn_streams_what_happened_then_what_happens(agent, http):
    sending = threading.Thread(
        target=http.post,
        args=("/api/v1/agents/dm/messages",),
        kwargs={"json": {"content": script(QUEST, UNTIL_CANCELLED, {"say": "late"})}},
    )
    sending.start()
    wait_for(lambda: (agent_events_buffer(agent.pk)[1] or [{}])[-1].get("type") == "tool_call")
    turn_id = agent_events_buffer(agent.pk)[1][-1]["turnId"]
    cancelled = []

    def cancel_once_caught_up(events):
        if len(events) == 3 and not cancelled:  # what happened before we came
            cancelled.append(http.post(f"/api/v1/agents/dm/turns/{turn_id}/cancel").status_code)
        return False

    events, _ = follow(http, turn_id, until=cancel_once_caught_up)
    sending.join(30)

    assert cancelled == [202]
    assert [name for name, _, _ in events] == ["turn.started", "memory.changed", "tool_call", "turn.finished"]
    finished = events[-1][2]
    assert finished["turn"]["status"] == finished["status"] == "cancelled"
    assert {"turn": finished["turn"]} == http.get(f"/api/v1/agents/dm/turns/{turn_id}").json()


def test_the_socket_accepts_the_key_as_a_subprotocol_and_answers_without_it(define, web, designer_key):
    define("dm")
    url = web.replace("http://", "ws://") + "/ws/v1/agents/dm/events"

    with ws_connect(url, subprotocols=["studio.v1", f"bearer.{designer_key}"]) as socket:
        hello = json.loads(socket.recv(timeout=10))

        assert socket.response.headers["Sec-WebSocket-Protocol"] == "studio.v1"
        assert designer_key not in str(socket.response.headers)
        assert hello["type"] == "hello" and hello["agent"] == "dm"


def test_every_event_of_a_turn_has_the_same_payload_over_sse_as_over_the_websocket(
    agent, web, http, designer_key
):
    url = web.replace("http://", "ws://") + "/ws/v1/agents/dm/events"
    with ws_connect(url, subprotocols=["studio.v1", f"bearer.{designer_key}"]) as socket:
        assert json.loads(socket.recv(timeout=10))["type"] == "hello"
        body = {"content": script(QUEST, {"say": "Done."}), "stream": True}
        with http.stream("POST", "/api/v1/agents/dm/messages", json=body) as response:
            streamed = [sse.json() for sse in httpx2.EventSource(response)]
        heard = [json.loads(socket.recv(timeout=10)) for _ in streamed]
    followed = [data for _, _, data in follow(http, streamed[0]["turnId"])[0]]

    assert [event["type"] for event in heard] == QUEST_EVENTS
    # A streamed send's answer, the turn followed afterwards, and the socket: one payload each.
    assert streamed == heard == followed
    assert heard[-1]["turn"] == http.get(f"/api/v1/agents/dm/turns/{heard[-1]['turnId']}").json()["turn"]
