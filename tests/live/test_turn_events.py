"""Following one turn (`agents.sending.sse.turn_events`) on the real Redis
channel layer: what already happened comes first, from the agent's buffer,
then live events, and last the turn as the API answers it. And the
server-sent events answer built on it."""

import asyncio
import json
import time
from contextlib import suppress

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from agents.models import Turn
from agents.sending import engine, sse
from agents.sending.sse import sse_response, turn_events
from agents.sending.turn_slot import turn_cancel
from agents.wire import turn_wire
from studio.live import events as live_events
from studio.live.events import BUFFER_SIZE, agent_events_buffer, publish_on_commit
from studio.models import ApiKey
from tests.support.events import probe, probe_n
from tests.support.live import QUEST, QUEST_EVENTS, buffered_until, in_background
from tests.support.sending import turn_send

from ..conftest import UNTIL_CANCELLED, client_for, error_of, script

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("event_buffers_cleared")]

SLOW = script(QUEST, UNTIL_CANCELLED, {"say": "too late"})


async def followed(events, count=None):
    """The first `count` events (all, by default), bounded so a hang fails."""
    out = []

    async def take():
        async for event in events:
            out.append(event)
            if len(out) == count:
                return

    await asyncio.wait_for(take(), 15)
    return out


def _wire(turn_uuid):
    return turn_wire(Turn.objects.get(uuid=turn_uuid))


async def test_a_running_turn_is_replayed_from_the_buffer_then_followed_live_to_its_end(define):
    agent = await database_sync_to_async(define)("dm")
    running = in_background(turn_send, agent=agent, content=SLOW)
    await buffered_until(agent, lambda e: e["type"] == "tool_call")  # then the turn sleeps
    turn = await database_sync_to_async(Turn.objects.get)(agent=agent)

    events = turn_events(agent, turn.uuid)
    replayed = await followed(events, 3)
    await database_sync_to_async(turn_cancel)(turn)  # ends the sleep: the rest is live
    rest = await followed(events)
    await running

    assert [e["type"] for e in replayed] == ["turn.started", "memory.changed", "tool_call"]
    assert [e["type"] for e in rest] == ["turn.finished"]
    finished = rest[0]
    assert finished["turn"] == await database_sync_to_async(_wire)(turn.uuid)
    assert finished["turn"]["status"] == "cancelled"
    seqs = [e["seq"] for e in replayed + rest]
    assert seqs == sorted(set(seqs)) and all(e["at"] for e in replayed + rest)


async def test_a_turn_that_has_ended_yields_its_buffered_events_and_its_end_at_once(define):
    agent = await database_sync_to_async(define)("dm")
    await database_sync_to_async(turn_send)(agent=agent, content="first")
    turn = await database_sync_to_async(turn_send)(agent=agent, content=script(QUEST, {"say": "Done."}))
    await database_sync_to_async(turn_send)(agent=agent, content="after")
    await buffered_until(agent, lambda e: e["type"] == "turn.finished" and e["reply"] != "Done.")

    events = await followed(turn_events(agent, turn.uuid))

    assert [e["type"] for e in events] == QUEST_EVENTS
    assert {e["turnId"] for e in events[:-1]} == {str(turn.uuid)}
    assert events[-1]["turn"] == await database_sync_to_async(_wire)(turn.uuid)
    assert events[-1]["turn"]["reply"] == "Done."


async def test_a_turn_whose_events_left_the_buffer_yields_its_end_from_the_database(define):
    agent = await database_sync_to_async(define)("dm")
    turn = await database_sync_to_async(turn_send)(agent=agent, content="long ago")

    def crowd_out():
        for n in range(BUFFER_SIZE):
            publish_on_commit(agent.pk, probe(n))

    await database_sync_to_async(crowd_out)()
    await buffered_until(agent, lambda e: probe_n(e) == BUFFER_SIZE - 1)

    events = await followed(turn_events(agent, turn.uuid))

    assert [e["type"] for e in events] == ["turn.finished"]
    assert events[0]["turn"] == await database_sync_to_async(_wire)(turn.uuid)


async def test_a_streamed_send_ends_with_the_turn_finished_it_published_however_far_behind_the_publisher_is(
    define, monkeypatch
):
    """On a loaded machine the event publisher can fall seconds behind the
    turn: the send's stream still ends with the `turn.finished` the
    WebSocket hears (its seq and time), not one built in its place."""
    agent = await database_sync_to_async(define)("dm")
    monkeypatch.setattr(sse, "SETTLE_SECONDS", 0.2)
    stamp = live_events._RedisBuffers.append_heard

    def late(self, agent_id, event):
        if event["type"] == "turn.finished":
            time.sleep(1.0)  # five times the settling time: the turn's answer is in long before
        return stamp(self, agent_id, event)

    monkeypatch.setattr(live_events._RedisBuffers, "append_heard", late)
    here = sse.SentHere(agent)
    turn, _ = await database_sync_to_async(engine.send_start)(
        agent=agent, content=script(QUEST, {"say": "Done."}), on_end=here.ended
    )

    streamed = [event for event in await followed(here.events(turn.uuid)) if event is not None]

    _, buffered = await sync_to_async(agent_events_buffer)(agent.pk)
    assert [e["type"] for e in streamed] == QUEST_EVENTS
    assert streamed == buffered
    assert streamed[-1]["turn"] == await database_sync_to_async(_wire)(turn.uuid)


async def a_watch(key_text: str) -> sse.StreamWatch:
    key = await database_sync_to_async(ApiKey.objects.get)(prefix=key_text.split("_")[1])
    return await database_sync_to_async(sse.StreamWatch)(key)


INTERRUPTED = sse.stream_interrupted("dm", "a-turn")


async def test_an_idle_stream_sends_a_comment_to_keep_proxies_from_closing_it(studio_conf, designer_key):
    studio_conf(SSE_KEEP_ALIVE_SECONDS=0.01)
    release = asyncio.Event()

    async def events():
        await release.wait()
        yield {"type": "probe", "seq": 7, "at": "2026-01-01T00:00:00+00:00"}

    response = sse_response(events(), watch=await a_watch(designer_key), interrupted=INTERRUPTED)
    chunks = aiter(response)

    assert (await anext(chunks)).startswith(b":")
    release.set()
    while (chunk := await anext(chunks)).startswith(b":"):
        pass
    assert chunk.startswith(b"event: probe\n")
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache" and response["X-Accel-Buffering"] == "no"


@pytest.mark.parametrize("keeps_alive", [False, True])
async def test_a_stream_whose_events_fail_ends_with_an_error_event_rather_than_falling_silent(
    designer_key, keeps_alive
):
    async def events():
        yield {"type": "probe", "seq": 7, "at": "2026-01-01T00:00:00+00:00"}
        raise ConnectionError("Connection closed by server.")

    response = sse_response(
        events(), watch=await a_watch(designer_key), interrupted=INTERRUPTED, keeps_alive=keeps_alive
    )
    chunks = [chunk async for chunk in response]

    assert chunks[0].startswith(b"event: probe\n")
    assert chunks[-1] == sse.sse_encode(INTERRUPTED)
    last = json.loads(chunks[-1].decode().split("data: ", 1)[1])
    assert last["code"] == "stream_interrupted"
    assert "GET /api/v1/agents/dm/turns/a-turn/events" in last["message"]


async def test_a_client_that_goes_away_stops_the_following(studio_conf, designer_key):
    studio_conf(SSE_KEEP_ALIVE_SECONDS=0.01)
    stopped = []

    async def events():
        try:
            await asyncio.Event().wait()
            yield {}
        finally:
            stopped.append(True)

    chunks = []
    watch = await a_watch(designer_key)

    async def read():  # as Django's ASGI handler does, until the client goes
        async for chunk in sse_response(events(), watch=watch, interrupted=INTERRUPTED):
            chunks.append(chunk)

    reading = asyncio.ensure_future(read())
    while not chunks:
        await asyncio.sleep(0.01)
    reading.cancel()  # what the handler does when the client disconnects
    with suppress(asyncio.CancelledError):
        await reading

    assert stopped == [True]


# --- the endpoint's refusals (the stream itself is read over HTTP in test_sse_server) -----


def test_following_needs_a_key(agent, anonymous, send):
    turn = send("hello")

    response = anonymous.get(f"/api/v1/agents/dm/turns/{turn['id']}/events", HTTP_ACCEPT="text/event-stream")

    assert response.status_code == 401 and error_of(response)["code"]


def test_another_games_turn_and_an_unknown_turn_are_404_in_json(agent, send, outsider_key, api):
    turn = send("hello")

    theirs = client_for(outsider_key).get(
        f"/api/v1/agents/dm/turns/{turn['id']}/events", HTTP_ACCEPT="text/event-stream"
    )
    unknown = api.get(
        "/api/v1/agents/dm/turns/5b0c3f5e-0000-4000-8000-000000000000/events", HTTP_ACCEPT="text/event-stream"
    )
    garbled = api.get("/api/v1/agents/dm/turns/nope/events")

    assert theirs.status_code == unknown.status_code == garbled.status_code == 404
    assert error_of(theirs)["code"] == "agent_not_found"
    assert error_of(unknown)["code"] == error_of(garbled)["code"] == "turn_not_found"


def test_following_is_a_get(agent, send, api):
    turn = send("hello")

    response = api.post(f"/api/v1/agents/dm/turns/{turn['id']}/events")

    assert response.status_code == 405 and error_of(response)["code"]


def test_the_schema_documents_the_event_stream(client):
    schema = json.loads(client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").content)

    operation = schema["paths"]["/api/v1/agents/{name}/turns/{turn_id}/events"]["get"]
    assert "text/event-stream" in operation["responses"]["200"]["content"]
    assert {"401", "404"} <= set(operation["responses"])
