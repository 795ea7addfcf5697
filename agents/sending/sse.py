"""Following one turn as it happens, and answering with server-sent events.

`turn_events` yields a turn's events — first those still in the agent's
buffer, then live ones — and ends with `turn.finished`, which carries the
turn as the API answered it when it ended. `sse_response` writes any such
stream as `text/event-stream`, each event's data what a WebSocket gets.
Both hold no database connection while they wait.

An answer is watched while it streams (`StreamWatch`): it holds one of its
game's stream slots, and every STUDIO_WS_REJOIN_SECONDS it renews that slot
and looks at its API key again; once the key is revoked or deleted the
answer ends with an `error` event (a streamed send's turn runs on: only the
listening stops).
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError
from django.http import StreamingHttpResponse
from django.utils import timezone
from rest_framework.negotiation import BaseContentNegotiation

from agents.models import Agent
from agents.selectors import turn_get
from agents.wire import turn_wire
from studio import event_types, metrics
from studio.events import EventCursor, LocalListener, agent_events_buffer, agent_group
from studio.keys import apikey_is_live
from studio.models import ApiKey
from studio.slots import stream_slot_give_back, stream_slot_renew, stream_slot_take

# While a turn is live, how often a follower that hears nothing looks at
# it in the database (in case its last event was lost).
POLL_SECONDS = 5.0
# A turn's last events are sent just after it ends: a follower that finds it
# ended this recently waits this long for them before ending without.
SETTLE_SECONDS = 2.0
# A comment line this often while a stream is idle keeps proxies from
# closing it.
KEEP_ALIVE_SECONDS = 15.0


# The last event of an answer whose key was revoked or deleted meanwhile.
KEY_GONE = event_types.error(
    code="unauthenticated",
    message="The API key this stream was opened with has been revoked or deleted: the stream ends here.",
)


class StreamWatch:
    """What an answer that streams keeps an eye on: its game's stream slot
    (taken when made — TooManyStreams past the game's limit — renewed, and
    given back when the answer ends) and the key it was opened with."""

    def __init__(self, key: ApiKey):
        self.key_id = key.pk
        self.slot = stream_slot_take(key.game_id)
        self.due = time.monotonic() + settings.STUDIO["WS_REJOIN_SECONDS"]
        self.is_open = True
        metrics.sse_opened()

    def until_due(self) -> float:
        return max(self.due - time.monotonic(), 0)

    async def key_gone(self) -> bool:
        """Whether the key is gone, looked at (and the slot renewed) once
        it is due; False in between."""
        if time.monotonic() < self.due:
            return False
        self.due = time.monotonic() + settings.STUDIO["WS_REJOIN_SECONDS"]
        return not await database_sync_to_async(self._look)()

    def _look(self) -> bool:
        stream_slot_renew(self.slot)
        try:
            return apikey_is_live(self.key_id)
        except DatabaseError:  # the database is away: look again when next due
            return True

    def give_back(self) -> None:
        """The answer has ended (or never began). Harmless twice."""
        stream_slot_give_back(self.slot)
        if self.is_open:
            self.is_open = False
            metrics.sse_closed()

    @contextmanager
    def given_back_on_error(self):
        """For the work between taking the slot and answering: a refusal
        there answers no stream, so it gives the slot back."""
        try:
            yield
        except BaseException:
            self.give_back()
            raise


async def turn_events(agent: Agent, turn_id) -> AsyncIterator[dict]:
    """The events of the agent's turn `turn_id` (its UUID), in seq order,
    ending with `turn.finished`."""
    turn_id = str(turn_id)
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(agent_group(agent.pk), channel)
    receiving = None
    try:
        # Listening before reading the buffer: nothing falls between the two.
        head, buffered = await sync_to_async(agent_events_buffer, thread_sensitive=False)(agent.pk)
        cursor = EventCursor(agent.pk, head)
        finished = None
        for event in _of_turn(buffered, turn_id):
            if event["type"] == "turn.finished":
                finished = event
                break
            yield event
        # The database is read only while nothing arrives, not per event.
        wait = await _wait_seconds(agent, turn_id)
        while finished is None and wait > 0:
            receiving = receiving or asyncio.ensure_future(layer.receive(channel))
            done, _ = await asyncio.wait({receiving}, timeout=wait)
            if not done:
                wait = await _wait_seconds(agent, turn_id)
                continue
            message, receiving = receiving.result(), None
            for event in _of_turn(await cursor.live(message["event"]) or [], turn_id):
                if event["type"] == "turn.finished":
                    finished = event
                    break
                yield event
        yield await _finished(agent, turn_id, finished, fallback_seq=cursor.seq)
    finally:
        if receiving is not None:
            receiving.cancel()
        with suppress(Exception):
            await layer.group_discard(agent_group(agent.pk), channel)


class SentHere:
    """A streamed send that runs in this process: its events are heard as
    they are sent (the listener is made before the turn begins, so none is
    missed), and its answer comes from the run itself."""

    ANSWER = "answer"  # what `ended` hands the follower

    def __init__(self, agent: Agent):
        self.agent = agent
        # Speed: a Redis round trip per event of a streamed send; guarded by bench/agent_server.py (streamed minus plain CPU).
        self.listener = LocalListener(agent.pk)

    def ended(self, sent) -> None:
        """Called in the send's thread with its `SendResult`."""
        wire = turn_wire(sent.turn, cost=sent.cost, entries=sent.entries)
        self.listener.hear({"type": self.ANSWER, "turnId": str(sent.turn.uuid), "turn": wire})

    async def events(self, turn_id) -> AsyncIterator[dict | None]:
        """`turn_events`, without a read of the buffer or the database on
        the way (the database only if the turn falls silent), and None
        while it is idle (for `sse_response(keeps_alive=True)`)."""
        turn_id, finished, answer, last_seq = str(turn_id), None, None, None
        try:
            while finished is None or answer is None:
                # The answer and turn.finished come together, by two routes.
                wait = SETTLE_SECONDS if finished or answer else min(POLL_SECONDS, KEEP_ALIVE_SECONDS)
                heard = await self.listener.next(wait)
                if not heard and (finished or answer or await _wait_seconds(self.agent, turn_id) <= 0):
                    break  # one of the two was lost
                if not heard:
                    yield None  # a keep-alive
                for event in _of_turn(heard, turn_id):
                    if event["type"] == self.ANSWER:
                        answer = event
                    elif event["type"] == "turn.finished":
                        finished = event
                    elif finished is None:
                        last_seq = event.get("seq", last_seq)
                        yield event
                if answer is not None and answer["turn"]["status"] == "waiting":
                    # It waits for the game: whichever process records the
                    # game's answers goes on with it, so follow it from here
                    # as any follower does.
                    async for event in _kept_alive(turn_events(self.agent, turn_id)):
                        if (
                            event is None
                            or last_seq is None
                            or event.get("seq") is None
                            or event["seq"] > last_seq
                        ):
                            yield event
                    return
            if answer is None or finished is not None:
                yield await _finished(self.agent, turn_id, finished, fallback_seq=None)
                return
            # Its event was lost: the answer stands in for it.
            yield {
                **event_types.turn_finished(agent=self.agent.name, turn=answer["turn"]),
                **_unstamped(None),
            }
        finally:
            self.listener.close()


async def _kept_alive(events: AsyncIterator[dict]) -> AsyncIterator[dict | None]:
    """`events`, with None after each KEEP_ALIVE_SECONDS that passes with none."""
    iterator, pending = aiter(events), None
    try:
        while True:
            pending = pending or asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=KEEP_ALIVE_SECONDS)
            if not done:
                yield None
                continue
            ready, pending = pending, None
            try:
                yield ready.result()
            except StopAsyncIteration:
                return
    finally:
        if pending is not None:
            pending.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await pending
        await iterator.aclose()


async def _finished(agent: Agent, turn_id: str, event: dict | None, fallback_seq: int | None) -> dict:
    """The stream's last event: the turn's `turn.finished` as published;
    built from the database when it was lost, or is of an older release
    (without the turn)."""
    if event is not None and "turn" in event:
        return event
    turn = await database_sync_to_async(lambda: turn_wire(turn_get(agent=agent, turn_id=turn_id)))()
    stamp = {"seq": event["seq"], "at": event["at"]} if event else _unstamped(fallback_seq)
    return {**event_types.turn_finished(agent=agent.name, turn=turn), **stamp}


def _unstamped(seq: int | None) -> dict:
    """The `seq` and `at` of a `turn.finished` built here, not published."""
    return {"seq": seq, "at": datetime.now(UTC).isoformat()}


def _of_turn(events: list[dict], turn_id: str) -> list[dict]:
    return [event for event in events if event.get("turnId") == turn_id]


async def _wait_seconds(agent: Agent, turn_id: str) -> float:
    """How long to wait for the turn's next event: POLL_SECONDS while it is
    live, what is left of SETTLE_SECONDS once it has ended."""
    ended_at = await database_sync_to_async(lambda: turn_get(agent=agent, turn_id=turn_id).ended_at)()
    if ended_at is None:
        return POLL_SECONDS
    return SETTLE_SECONDS - (timezone.now() - ended_at).total_seconds()


def sse_encode(event: dict) -> bytes:
    """One server-sent event: its type, its seq as the id, and as its data
    the event as a WebSocket gets it."""
    lines = [f"event: {event['type']}"]
    if event.get("seq") is not None:
        lines.append(f"id: {event['seq']}")
    lines.append(f"data: {json.dumps(event)}")
    return ("\n".join(lines) + "\n\n").encode()


def sse_response(
    events: AsyncIterator[dict | None], *, watch: StreamWatch, keeps_alive: bool = False
) -> StreamingHttpResponse:
    """`events` as a `text/event-stream` answer, watched by `watch`. The
    iterator must be async: under ASGI Django reads a sync one to its end
    before sending anything. With `keeps_alive`, the iterator yields None
    when the stream has been idle for KEEP_ALIVE_SECONDS itself (and so at
    least that often); otherwise that is watched here."""
    stream = _sse_encoded(events, watch) if keeps_alive else _sse_stream(events, watch)
    response = WatchedStreamingResponse(stream, watch=watch, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


class WatchedStreamingResponse(StreamingHttpResponse):
    def __init__(self, *args, watch: StreamWatch, **kwargs):
        super().__init__(*args, **kwargs)
        self.watch = watch

    def close(self):
        super().close()
        # The stream gives its slot back as it ends; this is for an answer
        # whose client left before it began.
        self.watch.give_back()


async def _sse_stream(events: AsyncIterator[dict], watch: StreamWatch) -> AsyncIterator[bytes]:
    iterator = aiter(events)

    async def following():
        return await anext(iterator)

    pending = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(following())
            timeout = min(KEEP_ALIVE_SECONDS, watch.until_due())
            done, _ = await asyncio.wait({pending}, timeout=timeout)
            if await watch.key_gone():
                yield sse_encode(KEY_GONE)
                return
            if not done:
                yield b": keep-alive\n\n"
                continue
            ready, pending = pending, None
            try:
                event = ready.result()
            except StopAsyncIteration:
                return
            yield sse_encode(event)
    finally:
        # The client went away (or the stream ended): stop following.
        if pending is not None:
            pending.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await pending
        if hasattr(iterator, "aclose"):
            await iterator.aclose()
        await sync_to_async(watch.give_back, thread_sensitive=False)()


async def _sse_encoded(events: AsyncIterator[dict | None], watch: StreamWatch) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            if await watch.key_gone():
                yield sse_encode(KEY_GONE)
                return
            yield b": keep-alive\n\n" if event is None else sse_encode(event)
    finally:
        if hasattr(events, "aclose"):
            await events.aclose()
        await sync_to_async(watch.give_back, thread_sensitive=False)()


class EventStreamNegotiation(BaseContentNegotiation):
    """For views that answer `text/event-stream` whatever `Accept` says:
    their errors are JSON, in the API's one error shape."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type
