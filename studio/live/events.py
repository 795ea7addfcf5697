"""Live events: small JSON dicts about one agent, sent to the agent's
channel-layer group only once the change they report is committed.

Each agent has an event buffer: a counter and its last BUFFER_SIZE
events, as far as they fit in STUDIO_EVENT_BUFFER_BYTES (the oldest go
first; the newest always stays). An event gets its `seq` (the counter's next value) and `at` (server
time, ISO 8601 UTC) when it is sent, and goes into the buffer in the same
step, so the buffer is in seq order and holds every event a listener may
have missed. With the Redis layer the buffer lives in Redis (a Redis stream): a background
thread takes the events from a queue in the order they were published and
for each makes one Lua call (count and buffer, on the lean connections of
`studio.runtime.redisconn`) and, when anyone listens, one group send, so a
send never waits on Redis. With the in-process layer (the
embedded default) the buffer is a deque, written in the sender's thread.

A buffer starts its counter from the clock in microseconds, so `seq` keeps
growing for an agent even when Redis loses its data or the embedded server
restarts: a listener then finds its place gone from the buffer and is told
to re-read, as when it has missed too much.

Every event is one of `studio.live.event_types`, built there: the publish
functions refuse any other.

Game-wide events (`budget.low`) are written into the buffer of each of the
game's agents: a listener follows one agent, so it gets them in that
agent's order and resumes past them like any other event.

Several processes may publish for one agent at once (a turn in a web
process, a compaction in a worker), so live events can arrive a little out
of seq order. `EventCursor` puts them back in order for a listener, filling
a gap from the buffer.
"""

import asyncio
import json
import logging
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import transaction

from studio.live.event_types import checked
from studio.models import Game
from studio.ops import metrics
from studio.runtime.redisconn import lean_client, redis_client

log = logging.getLogger(__name__)

BUFFER_SIZE = 1000
# An agent quiet this long loses its buffer (and a listener coming back, its place).
BUFFER_TTL_SECONDS = 24 * 3600
# An `after` past every seq: a read of the buffer that returns its head alone.
HEAD_ONLY = 10**18

# Count, stamp and buffer one event; return its seq and how many channels
# are in the agent's group (none: sending to the group can be skipped).
# KEYS: the counter, the buffer, the channel layer's key of the group, the
# buffer's size in bytes. ARGV: the event as JSON with `at` (and no seq),
# the most events the buffer keeps, the keys' time to live, the clock in
# microseconds (where a new or lost counter starts), the most bytes the
# buffer keeps. Numbers are formatted with %d: Lua would print a 16-digit
# one as 1.7e+15. A buffer with no byte count (kept by an older studio) is
# measured once.
APPEND = """
local seq = redis.call('INCR', KEYS[1])
if seq == 1 then
  seq = tonumber(ARGV[4])
  redis.call('SET', KEYS[1], string.format('%d', seq))
end
local text = string.format('%d', seq)
local item = string.sub(ARGV[1], 1, -2) .. ',"seq":' .. text .. '}'
local count = redis.call('RPUSH', KEYS[2], item)
local bytes = redis.call('INCRBY', KEYS[4], #item)
if count > 1 and bytes == #item then
  bytes = 0
  for _, kept in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do bytes = bytes + #kept end
  redis.call('SET', KEYS[4], bytes)
end
local most, most_bytes = tonumber(ARGV[2]), tonumber(ARGV[5])
while count > 1 and (count > most or bytes > most_bytes) do
  bytes = redis.call('DECRBY', KEYS[4], #redis.call('LPOP', KEYS[2]))
  count = count - 1
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[4], ARGV[3])
return {text, redis.call('ZCARD', KEYS[3])}
"""


# The counter, and the buffered events after ARGV[1] (all of them when it
# is empty). Seqs are consecutive, so those are the buffer's last
# head - ARGV[1]; the reader drops any older ones a reset counter let in.
READ = """
local head = redis.call('GET', KEYS[1])
local start = 0
if head and ARGV[1] ~= '' then
  local newer = tonumber(head) - tonumber(ARGV[1])
  if newer <= 0 then return {head} end
  start = -newer
end
return {head or false, unpack(redis.call('LRANGE', KEYS[2], start, -1))}
"""


def agent_group(agent_id: int) -> str:
    return f"agent.{agent_id}"


def _clock_seq() -> int:
    return time.time_ns() // 1000


def _now() -> str:
    return datetime.now(UTC).isoformat()


class _MemoryBuffers:
    """The agents' event buffers in the in-process layer: one process
    serves everything."""

    def __init__(self):
        self.lock = threading.Lock()
        # agent id -> [head seq, deque of (event, its size in bytes), bytes in all]
        self.buffers: dict[int, list] = {}

    def append(self, agent_id: int, event: dict) -> dict:
        event = {**event, "at": _now()}
        size = len(json.dumps(event))
        most_bytes = settings.STUDIO["EVENT_BUFFER_BYTES"]
        with self.lock:
            kept = self.buffers.setdefault(agent_id, [_clock_seq() - 1, deque(), 0])
            kept[0] += 1
            event["seq"] = kept[0]
            buffer = kept[1]
            buffer.append((event, size))
            kept[2] += size
            while len(buffer) > 1 and (len(buffer) > BUFFER_SIZE or kept[2] > most_bytes):
                kept[2] -= buffer.popleft()[1]
        return event

    def read(self, agent_id: int, after: int | None) -> tuple[int | None, list[dict]]:
        with self.lock:
            head, buffer, _ = self.buffers.get(agent_id, (None, (), 0))
            return head, [event for event, _ in buffer if after is None or event["seq"] > after]


class _RedisBuffers:
    def __init__(self, layer):
        self.layer = layer
        self.script = lean_client().script(APPEND)
        self.read_script = redis_client().register_script(READ)

    @staticmethod
    def _keys(agent_id: int) -> list[str]:
        stream = f"{settings.CHANNEL_PREFIX}:events:{agent_id}"
        return [f"{stream}:seq", stream, f"{stream}:bytes"]

    def append(self, agent_id: int, event: dict) -> dict:
        return self.append_heard(agent_id, event)[0]

    def append_heard(self, agent_id: int, event: dict) -> tuple[dict, bool]:
        """The event stamped, and whether anyone is in its agent's group."""
        event = {**event, "at": _now()}
        args = [
            json.dumps(event),
            BUFFER_SIZE,
            BUFFER_TTL_SECONDS,
            _clock_seq(),
            settings.STUDIO["EVENT_BUFFER_BYTES"],
        ]
        counter, stream, size = self._keys(agent_id)
        group_key = self.layer._group_key(agent_group(agent_id))
        seq, listening = self.script(keys=[counter, stream, group_key, size], args=args)
        return {**event, "seq": int(seq)}, bool(listening)

    def read(self, agent_id: int, after: int | None) -> tuple[int | None, list[dict]]:
        # One script: the counter and the buffer as of one moment.
        head, *items = self.read_script(keys=self._keys(agent_id)[:2], args=["" if after is None else after])
        events = [json.loads(item) for item in items]
        return (int(head) if head else None), [e for e in events if after is None or e["seq"] > after]


_memory_buffers = _MemoryBuffers()
_redis_buffers: _RedisBuffers | None = None


def _buffers(layer) -> _MemoryBuffers | _RedisBuffers:
    global _redis_buffers
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return _memory_buffers
    if _redis_buffers is None or _redis_buffers.layer is not layer:
        _redis_buffers = _RedisBuffers(layer)
    return _redis_buffers


class LocalListener:
    """Hears, in this process, the events this process publishes for one
    agent, each as it is sent (stamped with its seq), with no round trip
    through the channel layer: for a follower of a turn that runs here.
    Made in any thread; `next` is awaited on one event loop. Kept weakly,
    so one nobody follows any more goes by itself; `close` ends it."""

    def __init__(self, agent_id: int):
        self.agent_id = agent_id
        self.events: deque = deque()
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.arrived: asyncio.Event | None = None
        with _listeners_lock:
            _listeners.setdefault(agent_id, weakref.WeakSet()).add(self)

    def hear(self, event: dict) -> None:
        with self.lock:
            self.events.append(event)
            if self.loop is not None:
                self.loop.call_soon_threadsafe(self.arrived.set)

    async def next(self, timeout: float) -> list[dict]:
        """The events heard since the last call, waiting up to `timeout`
        seconds for one; [] when none came."""
        with self.lock:
            if self.loop is None:
                self.loop, self.arrived = asyncio.get_running_loop(), asyncio.Event()
            if not self.events:
                self.arrived.clear()
        if not self.events:
            with suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), timeout)
        with self.lock:
            heard = list(self.events)
            self.events.clear()
        return heard

    def close(self) -> None:
        with _listeners_lock:
            _listeners.get(self.agent_id, set()).discard(self)


_listeners: dict[int, weakref.WeakSet] = {}
_listeners_lock = threading.Lock()


def _hear_locally(agent_id: int, event: dict) -> None:
    with _listeners_lock:
        listeners = list(_listeners.get(agent_id, ()))
    for listener in listeners:
        listener.hear(event)


class _Publisher:
    """A daemon thread that drains a queue of (agent id, event): stamps each
    event into the agent's stream, then sends it to the agent's group, in
    order. The group send runs on an event loop of the thread's own, made
    the first time someone listens."""

    def __init__(self, layer):
        self.layer = layer
        self.loop: asyncio.AbstractEventLoop | None = None
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._drain, name="event-publisher", daemon=True).start()

    def _drain(self) -> None:
        while True:
            agent_id, event = self.queue.get()
            if agent_id is None:  # `submit_call`'s: `event` is the call
                try:
                    event()
                except Exception:
                    log.exception("a call after the events published before it failed")
                continue
            try:
                # The stream and the group are read in one script: a listener
                # that joins after it finds this event in the buffer.
                event, listening = _buffers(self.layer).append_heard(agent_id, event)
            except Exception:
                log.warning("could not publish %s for agent %s", event.get("type"), agent_id, exc_info=True)
                # Redis is away: this process's own followers (a streamed
                # send) still hear the event, with no seq to give it.
                _hear_locally(agent_id, {**event, "at": _now(), "seq": None})
                continue
            try:
                _hear_locally(agent_id, event)
                # Speed: a channel-layer send per event nobody hears; guarded by bench/agent_server.py (server CPU per message).
                if listening:
                    if self.loop is None:
                        self.loop = asyncio.new_event_loop()
                    self.loop.run_until_complete(
                        self.layer.group_send(agent_group(agent_id), {"type": "studio.event", "event": event})
                    )
            except Exception:  # a lost event must never break the publisher
                metrics.event_publish_failed()
                log.warning("could not publish %s for agent %s", event.get("type"), agent_id, exc_info=True)

    def submit(self, agent_id: int, event: dict) -> None:
        self.queue.put((agent_id, event))

    def submit_call(self, call: Callable[[], None]) -> None:
        """Run `call` here once every event submitted before it is handled."""
        self.queue.put((None, call))


_publisher: _Publisher | None = None
_publisher_lock = threading.Lock()


def _publisher_for(layer) -> _Publisher:
    global _publisher
    with _publisher_lock:
        if _publisher is None or _publisher.layer is not layer:
            _publisher = _Publisher(layer)
        return _publisher


def _send(agent_id: int, event: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if not isinstance(layer, InMemoryChannelLayer):
        _publisher_for(layer).submit(agent_id, event)
        return
    event = _memory_buffers.append(agent_id, event)
    _hear_locally(agent_id, event)
    group = agent_group(agent_id)
    if not layer.groups.get(group):
        return  # nobody in this process is listening to this agent
    try:
        async_to_sync(layer.group_send)(group, {"type": "studio.event", "event": event})
    except Exception:
        metrics.event_publish_failed()
        log.warning("could not publish %s to %s", event.get("type"), group, exc_info=True)


def after_published(call: Callable[[], None]) -> None:
    """Run `call` once every event this process published before it has
    been stamped and handed to this process's listeners (or failed to be): in
    the publisher's thread, behind those events, however far behind the
    turn it is; at once where events are sent in the sender's thread (the
    in-process layer), or nowhere."""
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        call()
        return
    _publisher_for(layer).submit_call(call)


def publish(agent_id: int, event: dict) -> None:
    """Send `event` now: for an event that reports no change to the
    database (a reply's text as the model writes it). Unlike
    `publish_on_commit` outside a transaction, it does not take a database
    connection to find out that none is open."""
    _send(agent_id, checked(event))


def publish_on_commit(agent_id: int, event: dict) -> None:
    """Send `event` to the agent's listeners after the current transaction
    commits (at once when there is none)."""
    checked(event)
    transaction.on_commit(lambda: _send(agent_id, event))


def publish_game_event_on_commit(game_id: int, event: dict) -> None:
    """Send `event` into the stream of each of the game's agents after commit."""
    checked(event)

    def fan_out():
        for agent_id in Game(pk=game_id).agents.values_list("pk", flat=True):
            _send(agent_id, event)

    transaction.on_commit(fan_out)


def agent_events_buffer(agent_id: int, after: int | None = None) -> tuple[int | None, list[dict]]:
    """The seq of the agent's newest event (None when it has no stream) and
    its buffered events, oldest first — with `after`, only those after that
    seq (only they are read)."""
    return _buffers(get_channel_layer()).read(agent_id, after)


def agent_events_head(agent_id: int) -> int | None:
    """The seq of the agent's newest event (None when it has no stream),
    reading none of its events."""
    return agent_events_buffer(agent_id, after=HEAD_ONLY)[0]


def agent_events_since(agent_id: int, seq: int) -> list[dict] | None:
    """The agent's events after `seq`, oldest first; None when the buffer
    no longer reaches back to seq + 1 (or `seq` is not of this stream)."""
    head, newer = agent_events_buffer(agent_id, after=seq)
    if head is None or seq > head:
        return None
    if seq < head and (not newer or newer[0]["seq"] != seq + 1):
        return None
    return newer


class EventCursor:
    """Where one listener is in an agent's stream: hands on its live events
    in seq order, none twice and none skipped, filling a gap from the buffer."""

    def __init__(self, agent_id: int, seq: int | None = None):
        self.agent_id, self.seq = agent_id, seq

    async def since(self, seq: int) -> list[dict] | None:
        """The events after `seq`, the cursor moved past them; None when the
        buffer does not reach back, the cursor then at the newest event."""
        missed = await sync_to_async(agent_events_since, thread_sensitive=False)(self.agent_id, seq)
        if missed is None:
            self.seq, _ = await sync_to_async(agent_events_buffer, thread_sensitive=False)(self.agent_id)
            return None
        self.seq = missed[-1]["seq"] if missed else seq
        return missed

    async def live(self, event: dict) -> list[dict] | None:
        """What to hand on now that `event` arrived: nothing for one already
        handed on, the events up to it after a gap, None past the buffer."""
        if self.seq is None or event["seq"] == self.seq + 1:
            self.seq = event["seq"]
            return [event]
        if event["seq"] <= self.seq:
            return []
        return await self.since(self.seq)
