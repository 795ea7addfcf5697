"""The reply as it is written: `reply.delta` events on the agent's
WebSocket, on the real ASGI application and the Redis channel layer."""

import asyncio

import pytest
from channels.db import database_sync_to_async

from agents.models import Turn, TurnStatus
from agents.sending.turn_slot import turn_cancel
from tests.support.live import connect, events_until
from tests.support.sending import turn_send

from ..conftest import call, script

pytestmark = pytest.mark.django_db(transaction=True)

SAY = "The bells of the drowned chapel ring at dusk."


async def listen(designer_key):
    communicator = await connect("/ws/v1/agents/dm/events", key=designer_key)
    assert (await communicator.receive_json_from())["type"] == "hello"
    return communicator


def in_background(fn, **kwargs):
    """`fn` in a thread of its own, so the test can look and act meanwhile."""
    return asyncio.ensure_future(database_sync_to_async(fn, thread_sensitive=False)(**kwargs))


def deltas(events) -> list[str]:
    return [e["text"] for e in events if e["type"] == "reply.delta"]


async def test_the_reply_arrives_in_pieces_that_join_to_it(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    communicator = await listen(designer_key)

    send = asyncio.ensure_future(
        database_sync_to_async(turn_send)(agent=agent, content=script({"say": SAY, "sleep": 0.05}))
    )
    events = await events_until(communicator, "turn.finished")
    turn = await send

    assert turn.reply == SAY
    assert len(deltas(events)) > 1
    assert "".join(deltas(events)) == SAY
    assert {e["turnId"] for e in events if e["type"] == "reply.delta"} == {str(turn.uuid)}
    assert [e["type"] for e in events][0] == "turn.started"
    await communicator.disconnect()


async def test_the_first_words_arrive_while_the_turn_is_still_running(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    communicator = await listen(designer_key)

    send = in_background(turn_send, agent=agent, content=script({"say": SAY, "sleep": 0.2}))
    first = await events_until(communicator, "reply.delta")
    status = await database_sync_to_async(lambda: Turn.objects.get(agent=agent).status)()
    rest = await events_until(communicator, "turn.finished")
    await send

    assert status == TurnStatus.RUNNING
    assert SAY.startswith(first[-1]["text"]) and first[-1]["text"] != SAY
    assert "".join(deltas(first + rest)) == SAY
    await communicator.disconnect()


async def test_a_reply_after_a_tool_call_streams_after_the_call(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    communicator = await listen(designer_key)

    send = asyncio.ensure_future(
        database_sync_to_async(turn_send)(
            agent=agent, content=script(call("open_memory", name="quest"), {"say": "Nothing yet."})
        )
    )
    events = await events_until(communicator, "turn.finished")
    await send

    types = [e["type"] for e in events]
    assert types.index("reply.delta") > types.index("tool_call")
    assert "".join(deltas(events)) == events[-1]["reply"] == "Nothing yet."
    await communicator.disconnect()


async def test_a_turn_cancelled_while_it_writes_stops_writing(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    communicator = await listen(designer_key)

    send = in_background(turn_send, agent=agent, content=script({"say": SAY, "sleep": 0.3}))
    await events_until(communicator, "reply.delta")
    await database_sync_to_async(lambda: turn_cancel(Turn.objects.get(agent=agent)))()
    events = await events_until(communicator, "turn.finished")
    turn = await send

    assert (turn.status, turn.reply) == (TurnStatus.CANCELLED, "")
    assert events[-1]["status"] == "cancelled"
    assert len(deltas(events)) < len(SAY.split()) - 1
    await communicator.disconnect()
