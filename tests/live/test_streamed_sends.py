"""A streamed send (`"stream": true`, or `Accept: text/event-stream`), from
a real Daphne server, read as game code would: with a streaming HTTP client
and its server-sent events parser (httpx2's)."""

import httpx2
import pytest
from django.conf import settings

from agents.models import Turn, TurnStatus
from agents.wire import turn_wire

from ..conftest import call, script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("event_buffers_cleared"),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) between the processes"),
]

SAY = "The ferryman lifts his lantern and points across the black water."
QUEST = call("close_memory", name="quest", description="Now", content="Cross the river.")
SEND = "/api/v1/agents/dm/messages"


def streamed(http, body: dict, *, until=None, **headers):
    """The answer's server-sent events as (name, data), and the answer."""
    events = []
    with http.stream("POST", SEND, json=body, headers=headers) as response:
        for sse in httpx2.EventSource(response):
            events.append((sse.event, sse.json()))
            if until and until(events):
                break
    return events, response


def reply_of(events) -> str:
    """The reply, joined from the deltas after the turn's last tool call."""
    names = [name for name, _ in events]
    after = max((i for i, name in enumerate(names) if name == "tool_call"), default=-1)
    return "".join(data["text"] for name, data in events[after + 1 :] if name == "reply.delta")


def test_a_streamed_send_answers_its_events_and_ends_with_the_turn_a_send_answers(agent, http):
    events, response = streamed(http, {"content": script(QUEST, {"say": SAY, "sleep": 0.1}), "stream": True})

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    names = [name for name, _ in events]
    assert names[0] == "turn.started" and names[-1] == "turn.finished"
    assert {"memory.changed", "tool_call"} <= set(names)
    assert names.count("reply.delta") > 1
    finished = events[-1][1]
    turn = finished["turn"]
    assert (turn["status"], turn["reply"]) == ("completed", SAY)
    assert (finished["status"], finished["reply"], finished["cost"]) == ("completed", SAY, turn["cost"])
    assert reply_of(events) == SAY
    assert {"turn": turn} == http.get(f"/api/v1/agents/dm/turns/{turn['id']}").json()
    assert {data["turnId"] for _, data in events} == {turn["id"]}
    seqs = [data["seq"] for _, data in events]
    assert seqs == sorted(set(seqs))


def test_accept_text_event_stream_streams_the_send_too(agent, http):
    events, response = streamed(http, {"content": "Hello?"}, Accept="text/event-stream")

    assert response.headers["content-type"].startswith("text/event-stream")
    assert events[-1][1]["turn"]["reply"] == reply_of(events) == 'You said: "Hello?"'


def test_refusals_are_json_errors_with_their_status(agent, http, studio_conf):
    empty = http.post(SEND, json={"content": " ", "stream": True})
    accepted_only_events = http.post(SEND, json={"content": ""}, headers={"Accept": "text/event-stream"})
    unknown = http.post("/api/v1/agents/nobody/messages", json={"content": "hi", "stream": True})

    for response, status in [(empty, 400), (accepted_only_events, 400), (unknown, 404)]:
        assert response.status_code == status
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"]["code"]
    assert not Turn.objects.exists()


def test_a_client_that_goes_away_does_not_cancel_the_turn(agent, http):
    body = {"content": script({"say": SAY, "sleep": 0.2}), "stream": True}

    events, _ = streamed(http, body, until=lambda events: events[-1][0] == "reply.delta")
    turn = Turn.objects.get(agent=agent)
    wait_for(lambda: Turn.objects.get(pk=turn.pk).has_ended)

    assert events[-1][0] == "reply.delta"
    turn.refresh_from_db()
    assert (turn.status, turn_wire(turn)["reply"]) == (TurnStatus.COMPLETED, SAY)


def test_a_cancel_ends_the_stream_with_the_cancelled_turn(agent, http):
    body = {"content": script({"say": SAY, "sleep": 0.3}), "stream": True}
    cancelled = []

    def cancel_once_writing(events):
        if events[-1][0] == "reply.delta" and not cancelled:
            turn_id = events[-1][1]["turnId"]
            cancelled.append(http.post(f"/api/v1/agents/dm/turns/{turn_id}/cancel"))
        return False

    events, _ = streamed(http, body, until=cancel_once_writing)

    assert cancelled[0].status_code == 202
    turn = events[-1][1]["turn"]
    assert (events[-1][0], turn["status"], turn["reply"]) == ("turn.finished", "cancelled", "")


def test_a_repeat_under_its_idempotency_key_follows_the_same_turn(agent, http):
    body = {"content": script({"say": SAY, "sleep": 0.1}), "stream": True}
    headers = {"Idempotency-Key": "msg-7"}

    first, _ = streamed(http, body, until=lambda events: events[-1][0] == "reply.delta", **headers)
    again, _ = streamed(http, body, **headers)

    assert Turn.objects.filter(agent=agent).count() == 1
    assert again[-1][1]["turn"]["id"] == first[-1][1]["turnId"]
    assert again[-1][1]["turn"]["reply"] == SAY
