"""Following one turn as it happens, and answering with server-sent events.

A small stand-in for the events branch's module of the same name (which
replays a turn's events from the agent's buffer, with `seq` and `at`): this
one follows the agent's group live, from when it is called, and says the
turn has started when it already had.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import suppress

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.http import StreamingHttpResponse

from studio.events import agent_group

from .models import Agent, TurnStatus
from .selectors import turn_get, turn_wire

# While nothing arrives, how often the turn is looked at in the database
# (in case its last event was lost).
POLL_SECONDS = 1.0
# Events that concern the running turn without naming it.
UNNAMED = ("memory.changed",)


async def turn_events(agent: Agent, turn_id) -> AsyncIterator[dict]:
    """The events of the agent's turn `turn_id` (its UUID), ending with
    `{"type": "turn.finished", "turn": …}` (the turn as the API answers it)."""
    turn_id = str(turn_id)
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(agent_group(agent.pk), channel)
    try:
        turn = await database_sync_to_async(turn_get)(agent=agent, turn_id=turn_id)
        started = turn.status != TurnStatus.QUEUED
        if started:
            yield {"type": "turn.started", "agent": agent.name, "turnId": turn_id, "block": turn.block_number}
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), POLL_SECONDS)
            except TimeoutError:
                if await database_sync_to_async(lambda: turn_get(agent=agent, turn_id=turn_id).has_ended)():
                    break
                continue
            event = message["event"]
            if event.get("turnId", turn_id if event["type"] in UNNAMED and started else None) != turn_id:
                continue
            if event["type"] == "turn.finished":
                break
            if event["type"] == "turn.started":
                if started:
                    continue
                started = True
            yield event
        wire = await database_sync_to_async(lambda: turn_wire(turn_get(agent=agent, turn_id=turn_id)))()
        yield {"type": "turn.finished", "turn": wire}
    finally:
        with suppress(Exception):
            await layer.group_discard(agent_group(agent.pk), channel)


def sse_encode(event: dict) -> bytes:
    """One server-sent event: its type, and its fields as JSON
    (`turn.finished`: exactly `{"turn": …}`, the body a send answers)."""
    data = {"turn": event["turn"]} if event["type"] == "turn.finished" else event
    return f"event: {event['type']}\ndata: {json.dumps(data)}\n\n".encode()


def sse_response(events: AsyncIterator[dict]) -> StreamingHttpResponse:
    """`events` as a `text/event-stream` answer."""

    async def encoded():
        async for event in events:
            yield sse_encode(event)

    response = StreamingHttpResponse(encoded(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response
