"""Waiting without holding anything shared.

A send queued behind its agent's earlier sends, a send waiting on a
compaction and a retried send following the turn it repeats all wait here:
on a `threading.Event`, holding no database connection, until what they
wait for may have happened (a turn of the agent ended, a compaction
finished). Then they look again in the database. A running turn waiting
on its model listens here for a cancel (`cancel_key`).

Wake-ups cross processes through Redis pub/sub, on one subscriber
connection per process however many requests wait in it; without Redis
(the embedded default, one process) they stay in the process. A wake-up is
a hint, never the truth: a waiter looks again at least every
`POLL_SECONDS` (a running turn when its lease's renewal finds it must stop:
`agents.sending.leases`), and every waiter looks again when the subscriber
(re)connects, so a lost one (Redis restarting) costs latency, not
correctness. Publishing goes through a background thread, so a request
never waits on Redis to notify.

Every process hears every wake-up it is sent, so what is sent is work for
all of them. The commonest, a turn's end (`turns_key`, one per turn), is
rarely waited for: only by a send queued behind the agent's turn or
following one. So its waiters say so in Redis (`_Announcement`: a place
in studio.runtime.slots per key, lasting ANNOUNCE_SECONDS unless renewed
as it waits, so a waiter whose process died stops counting; taken again
once the process reconnects, in case Redis restarted), and a turn's end
is sent only while someone, in any process, waits for it. A cancel (every
running turn listens for its own) and a compaction's end (rare) are always
sent.
"""

import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

from django.conf import settings
from django.db import connection, transaction

from studio.runtime.slots import slot_give_back, slot_renew, slot_take, slots_key

log = logging.getLogger(__name__)

# The longest a waiter goes without looking again, woken or not.
POLL_SECONDS = 1.0
# How long a waiter's announcement lasts, and how often a waiter renews it.
ANNOUNCE_SECONDS = 60
ANNOUNCE_RENEW_SECONDS = 20


def turns_key(agent_id: int) -> str:
    """Woken when one of the agent's turns ends (or a queued one is cancelled)."""
    return f"turns.{agent_id}"


def cancel_key(agent_id: int) -> str:
    """Woken when a running turn of the agent is asked to stop (a cancel)."""
    return f"cancel.{agent_id}"


def compaction_key(agent_id: int) -> str:
    """Woken when an attempt at one of the agent's compactions ends."""
    return f"compaction.{agent_id}"


class Bell(threading.Event):
    """A waiter's event, which also calls its `ring` (when it has one) as it
    is set: a thread blocked on something else (a queue) is woken by it."""

    ring: Callable[[], None] | None = None

    def set(self) -> None:
        super().set()
        ring = self.ring
        if ring is not None:
            ring()


class _Waiters:
    """This process's waiting threads, by what they wait for."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events: dict[str, set[Bell]] = {}

    def add(self, key: str) -> Bell:
        event = Bell()
        with self.lock:
            self.events.setdefault(key, set()).add(event)
        return event

    def remove(self, key: str, event: Bell) -> None:
        with self.lock:
            waiting = self.events.get(key)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self.events[key]

    def wake(self, key: str | None = None) -> None:
        """Wake the waiters for `key` (None: every waiter)."""
        with self.lock:
            groups = list(self.events.values()) if key is None else [self.events.get(key, ())]
            for waiting in groups:
                for event in waiting:
                    event.set()


_waiters = _Waiters()


class Waiter:
    def __init__(self, event: Bell, announcement: "_Announcement | None" = None):
        self.event = event
        self.announcement = announcement

    def wait(self, timeout: float, *, longest: float = POLL_SECONDS) -> bool:
        """Sleep until woken or `timeout` (at most `longest`) passes, with
        this thread's database connection handed back first. True when
        woken."""
        connection_release()
        if self.announcement is not None:
            self.announcement.renew_if_due()
        woken = self.event.wait(max(0.0, min(timeout, longest)))
        self.event.clear()
        return woken


@contextmanager
def listening(key: str):
    """Listen for wake-ups of `key`. Enter before looking at the database,
    so a change committed between the look and the wait still wakes."""
    _subscriber_start()
    event = _waiters.add(key)
    announcement = _Announcement(key) if _announced(key) else None
    try:
        yield Waiter(event, announcement)
    finally:
        _waiters.remove(key, event)
        if announcement is not None:
            announcement.withdraw()


def notify_on_commit(key: str) -> None:
    """Wake whoever waits for `key`, here and in other processes, once the
    current transaction commits."""
    transaction.on_commit(lambda: notify(key))


def notify(key: str) -> None:
    _waiters.wake(key)
    if settings.REDIS_URL:
        _outbox().put(key)


def connection_release() -> None:
    """Hand this thread's database connection back (to the pool, or close
    it) — not inside a transaction, whose connection must stay."""
    if not connection.in_atomic_block:
        connection.close()


# --- across processes ---------------------------------------------------------------


def _channel_prefix() -> str:
    return f"{settings.CHANNEL_PREFIX}:wake:"


def _announced(key: str) -> bool:
    """Whether `key`'s wake-ups are sent only while someone announces waiting for them."""
    # Speed: every web process parsing every turn's end of the deployment; guarded by bench/heard.py (the idle process's CPU per message).
    return key.startswith("turns.") and bool(settings.REDIS_URL)


def _waiting_key(key: str) -> str:
    return slots_key("waiting", key)


# Sent only while a waiter's place has not lapsed. KEYS[1]: the places;
# ARGV: now, the channel.
_SEND_IF_WAITED = """
if redis.call('ZCOUNT', KEYS[1], ARGV[1], '+inf') == 0 then
  return -1
end
return redis.call('PUBLISH', ARGV[2], '')
"""

# How many times this process's subscriber has (re)connected to Redis: a
# Redis that restarted lost every announcement, so each is made again.
_connections_made = 0


class _Announcement:
    """One waiter's place among those waiting for `key`, taken before the
    waiter looks at the database (so a change committed after its look is
    sent), renewed as it waits and once the subscriber has reconnected,
    given back when it stops. Redis away, the waiter is not counted and
    wakes by looking again (POLL_SECONDS)."""

    def __init__(self, key: str):
        self.slot = slot_take(_waiting_key(key), limit=None, lease=ANNOUNCE_SECONDS)
        self.renewed, self.connection = time.monotonic(), _connections_made

    def renew_if_due(self) -> None:
        now = time.monotonic()
        if now - self.renewed < ANNOUNCE_RENEW_SECONDS and self.connection == _connections_made:
            return
        self.renewed, self.connection = now, _connections_made
        slot_renew(self.slot, lease=ANNOUNCE_SECONDS)

    def withdraw(self) -> None:
        slot_give_back(self.slot)


_started_lock = threading.Lock()
_subscriber: threading.Thread | None = None
_sender: "queue.SimpleQueue[str] | None" = None


def _subscriber_start() -> None:
    global _subscriber
    if not settings.REDIS_URL or _subscriber is not None:
        return
    with _started_lock:
        if _subscriber is None:
            _subscriber = threading.Thread(target=_subscribe, name="wakeups-in", daemon=True)
            _subscriber.start()


def _glob_escaped(text: str) -> str:
    """`text` matched literally by a Redis pattern (a database path may hold `[`)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _subscribe() -> None:
    """Forever: hear every wake-up of this deployment and wake the local
    waiters it names. After (re)connecting every waiter looks again, since
    wake-ups sent meanwhile are lost."""
    from studio.runtime.redisconn import redis_client

    prefix = _channel_prefix()
    pause = 0.2
    while True:
        try:
            pubsub = redis_client(blocking=True).pubsub(ignore_subscribe_messages=True)
            pubsub.psubscribe(_glob_escaped(prefix) + "*")
            _reconnected()
            pause = 0.2
            while True:
                message = pubsub.get_message(timeout=POLL_SECONDS)
                if message and message.get("type") == "pmessage":
                    channel = message["channel"]
                    channel = channel.decode() if isinstance(channel, bytes) else channel
                    _waiters.wake(channel.removeprefix(prefix))
        except Exception:
            log.warning("wake-ups from other processes are paused: Redis is unavailable", exc_info=True)
            time.sleep(pause)
            pause = min(pause * 2, 5)


def wake_all() -> None:
    """Wake every waiter of this process: each looks again."""
    _waiters.wake()


def _reconnected() -> None:
    """The subscriber has (re)connected: wake-ups sent meanwhile are lost,
    and so are the announcements if Redis restarted. Every waiter looks
    again, and announces itself again before it next waits."""
    global _connections_made
    _connections_made += 1
    wake_all()


def _outbox() -> "queue.SimpleQueue[str]":
    global _sender
    if _sender is None:
        with _started_lock:
            if _sender is None:
                outbox: queue.SimpleQueue[str] = queue.SimpleQueue()
                threading.Thread(target=_publish, args=(outbox,), name="wakeups-out", daemon=True).start()
                _sender = outbox
    return _sender


def _publish(outbox: "queue.SimpleQueue[str]") -> None:
    from studio.runtime.redisconn import lean_client

    prefix = _channel_prefix()
    while True:
        key = outbox.get()
        try:
            if _announced(key):
                script = lean_client().script(_SEND_IF_WAITED)
                script(keys=[_waiting_key(key)], args=[time.time(), prefix + key])
            else:
                lean_client().call("PUBLISH", prefix + key, b"")
        except Exception:  # other processes look again within POLL_SECONDS
            log.warning("could not send a wake-up for %s", key, exc_info=True)
