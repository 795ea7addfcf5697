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
import logging
import time
from collections.abc import AsyncIterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django import db
from django.conf import settings
from django.http import StreamingHttpResponse
from django.utils import timezone
from rest_framework.negotiation import BaseContentNegotiation

from agents.models import Agent
from agents.selectors import turn_get
from agents.wire import turn_wire
from studio.auth.keys import apikey_is_live
from studio.live import event_types
from studio.live.events import EventCursor, LocalListener, after_published, agent_events_buffer, agent_group
from studio.models import ApiKey
from studio.ops import metrics
from studio.runtime.slots import stream_slot_give_back, stream_slot_renew, stream_slot_take

# While a turn is live, how often a follower that hears nothing looks at
# it in the database (in case its last event was lost).
POLL_SECONDS = 5.0
# A turn's last events are sent just after it ends: a follower that finds it
# ended this recently waits this long for them before ending without.
SETTLE_SECONDS = 2.0
# While Redis is away a follower hears nothing through the channel layer:
# it looks at its turn in the database this often instead.
OUTAGE_POLL_SECONDS = 1.0

log = logging.getLogger(__name__)


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
        except db.Error:  # the database is away: look again when next due
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


def stream_interrupted(agent_name: str, turn_id: str) -> dict:
    """The last event of a stream that can no longer learn anything of its
    turn: neither the channel layer (Redis) nor the database answers."""
    return event_types.error(
        code="stream_interrupted",
        message=(
            "The studio can no longer follow this turn (neither its database nor Redis answers), so "
            f"this stream ends here. Reconnect with GET /api/v1/agents/{agent_name}/turns/{turn_id}/events "
            "once it answers: that stream sends the turn's events again and ends with turn.finished."
        ),
    )


class _Heard:
    """An agent's events as the channel layer brings them to one follower —
    until the layer fails (Redis away). From then on it hears nothing
    (`is_deaf`), and the follower learns how its turn ends from the
    database instead."""

    def __init__(self, agent_id: int):
        self.layer, self.group = get_channel_layer(), agent_group(agent_id)
        self.channel: str | None = None
        self.receiving: asyncio.Future | None = None
        self.is_deaf = False

    async def join(self) -> None:
        try:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(self.group, self.channel)
        except Exception:
            self.deafen()

    def deafen(self) -> None:
        if not self.is_deaf:
            log.warning(
                "a stream no longer hears %s: the channel layer is unavailable", self.group, exc_info=True
            )
        self.is_deaf = True

    async def next(self, timeout: float) -> dict | None:
        """The next message, or None when none came within `timeout`."""
        if self.is_deaf:
            await asyncio.sleep(timeout)
            return None
        self.receiving = self.receiving or asyncio.ensure_future(self.layer.receive(self.channel))
        done, _ = await asyncio.wait({self.receiving}, timeout=timeout)
        if not done:
            return None
        receiving, self.receiving = self.receiving, None
        try:
            return receiving.result()
        except Exception:
            self.deafen()
            return None

    async def buffer(self, agent_id: int) -> tuple[int | None, list[dict]]:
        """The agent's buffer (`agent_events_buffer`); nothing once Redis is away."""
        if not self.is_deaf:
            try:
                return await sync_to_async(agent_events_buffer, thread_sensitive=False)(agent_id)
            except Exception:
                self.deafen()
        return None, []

    async def live(self, cursor: EventCursor, event: dict) -> list[dict]:
        """`cursor.live`: the event, and those a gap before it held; the
        event alone when the buffer cannot be read."""
        try:
            return await cursor.live(event) or []
        except Exception:
            self.deafen()
            return [event]

    async def leave(self) -> None:
        if self.receiving is not None:
            self.receiving.cancel()
        if self.channel is not None and not self.is_deaf:
            with suppress(Exception):
                await self.layer.group_discard(self.group, self.channel)


# What `_turn_look` answers when the database cannot be read.
UNREADABLE = "unreadable"


async def turn_events(agent: Agent, turn_id) -> AsyncIterator[dict]:
    """The events of the agent's turn `turn_id` (its UUID), in seq order,
    ending with `turn.finished` — or with `stream_interrupted` once neither
    the channel layer nor the database answers. While Redis is away the
    turn is looked at in the database every OUTAGE_POLL_SECONDS, and
    `turn.finished` (the turn whole) is built from it."""
    turn_id = str(turn_id)
    heard = _Heard(agent.pk)
    # Listening before reading the buffer: nothing falls between the two.
    await heard.join()
    try:
        head, buffered = await heard.buffer(agent.pk)
        cursor = EventCursor(agent.pk, head)
        finished = None
        for event in _of_turn(buffered, turn_id):
            if event["type"] == "turn.finished":
                finished = event
                break
            yield event
        # The database is read only while nothing arrives, not per event.
        look = await _turn_look(agent, turn_id)
        while finished is None:
            if look == UNREADABLE:
                if heard.is_deaf:
                    yield stream_interrupted(agent.name, turn_id)
                    return
                look = (False, POLL_SECONDS)
            has_ended, wait = look
            if wait <= 0 or (has_ended and heard.is_deaf):
                break
            message = await heard.next(min(wait, OUTAGE_POLL_SECONDS) if heard.is_deaf else wait)
            if message is None:
                look = await _turn_look(agent, turn_id)
                continue
            for event in _of_turn(await heard.live(cursor, message["event"]), turn_id):
                if event["type"] == "turn.finished":
                    finished = event
                    break
                yield event
        yield await _finished(agent, turn_id, finished, fallback_seq=cursor.seq)
    finally:
        await heard.leave()


class SentHere:
    """A streamed send that runs in this process: its events are heard as
    they are sent (the listener is made before the turn begins, so none is
    missed), and its answer comes from the run itself."""

    ANSWER = "answer"  # what `ended` hands the follower
    GONE = "gone"  # what it hands on when the run ended with no answer (it raised)

    def __init__(self, agent: Agent):
        self.agent = agent
        # Speed: a Redis round trip per event of a streamed send; guarded by bench/agent_server.py (streamed minus plain CPU).
        self.listener = LocalListener(agent.pk)

    def ended(self, sent) -> None:
        """Called in the send's thread with its `SendResult`, or None when
        the run ended without one (the database went away under it, say)."""
        if sent is None:
            said = {"type": self.GONE}
        else:
            wire = turn_wire(sent.turn, cost=sent.cost, entries=sent.entries)
            said = {"type": self.ANSWER, "turnId": str(sent.turn.uuid), "turn": wire}
        # Behind the turn's own events: its turn.finished is heard first,
        # however far behind the turn the publisher is.
        after_published(lambda: self.listener.hear(said))

    async def events(self, turn_id) -> AsyncIterator[dict | None]:
        """`turn_events`, without a read of the buffer or the database on
        the way (the database only if the turn falls silent), and None
        while it is idle (for `sse_response(keeps_alive=True)`). The run
        here says how the turn ended whatever Redis or the database do; a
        run that ended without saying is followed up in the database."""
        turn_id, finished, answer, last_seq = str(turn_id), None, None, None
        try:
            while finished is None or answer is None:
                # The answer comes behind the turn's events (`ended`): with it
                # and no turn.finished before it, that event was never published.
                wait = SETTLE_SECONDS if finished or answer else min(POLL_SECONDS, _keep_alive_seconds())
                heard = await self.listener.next(wait)
                if not heard and (finished or answer or await self._has_ended(turn_id)):
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
                if any(event["type"] == self.GONE for event in heard):
                    break
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

    async def _has_ended(self, turn_id: str) -> bool:
        """Whether the database has the turn ended (and its events settled);
        while it cannot be read, the run here will say."""
        look = await _turn_look(self.agent, turn_id)
        return look != UNREADABLE and look[1] <= 0


async def _kept_alive(events: AsyncIterator[dict]) -> AsyncIterator[dict | None]:
    """`events`, with None after each STUDIO_SSE_KEEP_ALIVE_SECONDS that passes with none."""
    iterator, pending = aiter(events), None
    try:
        while True:
            pending = pending or asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=_keep_alive_seconds())
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
    (without the turn); `stream_interrupted` when it must be built and the
    database cannot be read."""
    if event is not None and "turn" in event:
        return event
    try:
        turn = await database_sync_to_async(lambda: turn_wire(turn_get(agent=agent, turn_id=turn_id)))()
    except db.Error:
        log.warning("turn %s: its stream could not read how it ended", turn_id, exc_info=True)
        return stream_interrupted(agent.name, turn_id)
    stamp = {"seq": event["seq"], "at": event["at"]} if event else _unstamped(fallback_seq)
    return {**event_types.turn_finished(agent=agent.name, turn=turn), **stamp}


def _keep_alive_seconds() -> float:
    """A comment line this often while a stream is idle keeps proxies from
    closing it (STUDIO_SSE_KEEP_ALIVE_SECONDS)."""
    return settings.STUDIO["SSE_KEEP_ALIVE_SECONDS"]


def _unstamped(seq: int | None) -> dict:
    """The `seq` and `at` of a `turn.finished` built here, not published."""
    return {"seq": seq, "at": datetime.now(UTC).isoformat()}


def _of_turn(events: list[dict], turn_id: str) -> list[dict]:
    return [event for event in events if event.get("turnId") == turn_id]


async def _turn_look(agent: Agent, turn_id: str) -> tuple[bool, float] | str:
    """Whether the turn has ended, and how long to wait for its next event:
    POLL_SECONDS while it is live, what is left of SETTLE_SECONDS once it
    has ended. UNREADABLE when the database does not answer."""
    try:
        ended_at = await database_sync_to_async(lambda: turn_get(agent=agent, turn_id=turn_id).ended_at)()
    except db.Error:
        return UNREADABLE
    if ended_at is None:
        return False, POLL_SECONDS
    return True, SETTLE_SECONDS - (timezone.now() - ended_at).total_seconds()


def sse_encode(event: dict) -> bytes:
    """One server-sent event: its type, its seq as the id, and as its data
    the event as a WebSocket gets it."""
    lines = [f"event: {event['type']}"]
    if event.get("seq") is not None:
        lines.append(f"id: {event['seq']}")
    lines.append(f"data: {json.dumps(event)}")
    return ("\n".join(lines) + "\n\n").encode()


def sse_response(
    events: AsyncIterator[dict | None],
    *,
    watch: StreamWatch,
    interrupted: dict,
    keeps_alive: bool = False,
) -> StreamingHttpResponse:
    """`events` as a `text/event-stream` answer, watched by `watch`. The
    iterator must be async: under ASGI Django reads a sync one to its end
    before sending anything. With `keeps_alive`, the iterator yields None
    when the stream has been idle for STUDIO_SSE_KEEP_ALIVE_SECONDS itself (and so at
    least that often); otherwise that is watched here. Should the iterator
    raise, the answer ends with `interrupted` (an `error` event): once an
    answer has begun, an exception would leave the client's connection
    open and silent — Daphne can no longer answer it, nor end it."""
    stream = (_sse_encoded if keeps_alive else _sse_stream)(events, watch, interrupted)
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


async def _sse_stream(
    events: AsyncIterator[dict], watch: StreamWatch, interrupted: dict
) -> AsyncIterator[bytes]:
    iterator = aiter(events)

    async def following():
        return await anext(iterator)

    pending = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(following())
            timeout = min(_keep_alive_seconds(), watch.until_due())
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
            except Exception:
                log.warning("a stream's events failed: it ends with %s", interrupted["code"], exc_info=True)
                yield sse_encode(interrupted)
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


async def _sse_encoded(
    events: AsyncIterator[dict | None], watch: StreamWatch, interrupted: dict
) -> AsyncIterator[bytes]:
    try:
        while True:
            try:
                event = await anext(events)
            except StopAsyncIteration:
                return
            except Exception:
                log.warning("a stream's events failed: it ends with %s", interrupted["code"], exc_info=True)
                yield sse_encode(interrupted)
                return
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
