"""How many live streams a game holds open: WebSocket listeners (game code's
and the studio pages') and server-sent event answers together, at most
STUDIO_MAX_STREAMS_PER_GAME (200) across every web process.

Each open stream holds a slot: an entry in its game's sorted set in Redis
(without Redis, in this process), scored with the time it lapses. A stream
renews its slot while it stays open and gives it back however it ends; a
slot whose process died without giving it back lapses after lease_seconds,
so a crash frees its game's slots within minutes, never leaks them for good.
Past the limit a new stream is refused with TooManyStreams (429 with
Retry-After; a WebSocket closes with 4429).

A limit that cannot be counted (Redis down) lets the stream through: the
limit protects the studio, it must not take it down.
"""

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from .errors import DomainError
from .redisconn import redis_client

log = logging.getLogger(__name__)

# A stream renews its slot each STUDIO_WS_REJOIN_SECONDS; a slot lapses a
# few renewals after the last one, and never sooner than this.
LEASE_FLOOR_SECONDS = 60.0
RETRY_AFTER_SECONDS = 10

# KEYS[1]: the game's slots; ARGV: now, lease (s), limit, the new slot.
# Returns 1 when the slot was taken, 0 when the game has none free.
TAKE = """
local key, now, lease = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if redis.call('ZCARD', key) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', key, now + lease, ARGV[4])
redis.call('PEXPIRE', key, math.ceil(lease * 1000))
return 1
"""

_lock = threading.Lock()
_script = None
# Without Redis: game id → {slot: when it lapses}.
_local: dict[int, dict[str, float]] = {}


class TooManyStreams(DomainError):
    status = 429
    code = "too_many_streams"

    def __init__(self):
        limit = settings.STUDIO["MAX_STREAMS_PER_GAME"]
        super().__init__(
            f"This game has {limit} live streams open (WebSockets and server-sent event answers "
            "together, STUDIO_MAX_STREAMS_PER_GAME): close one, or try again later.",
            retry_after=RETRY_AFTER_SECONDS,
        )


@dataclass(frozen=True)
class StreamSlot:
    game_id: int
    member: str


def lease_seconds() -> float:
    return max(LEASE_FLOOR_SECONDS, 3 * settings.STUDIO["WS_REJOIN_SECONDS"])


def _key(game_id: int) -> str:
    return f"{settings.CHANNEL_PREFIX}:streams:{game_id}"


def stream_slot_take(game_id: int) -> StreamSlot:
    """A slot for a new stream of the game, or TooManyStreams."""
    slot, now = StreamSlot(game_id, uuid.uuid4().hex), time.time()
    limit, lease = settings.STUDIO["MAX_STREAMS_PER_GAME"], lease_seconds()
    try:
        if settings.REDIS_URL:
            taken = _take_script()(keys=[_key(game_id)], args=[now, lease, limit, slot.member])
        else:
            taken = _local_take(slot, now, lease, limit)
    except Exception:
        log.warning("a stream of game %s not counted: Redis is unavailable", game_id, exc_info=True)
        return slot
    if not taken:
        raise TooManyStreams()
    return slot


def stream_slot_renew(slot: StreamSlot) -> None:
    """Keep the slot of a stream that is still open (taking it again if it
    lapsed meanwhile: Redis restarted, say)."""
    now, lease = time.time(), lease_seconds()
    try:
        if settings.REDIS_URL:
            pipe = redis_client().pipeline()
            pipe.zadd(_key(slot.game_id), {slot.member: now + lease})
            pipe.pexpire(_key(slot.game_id), int(lease * 1000))
            pipe.execute()
            return
        with _lock:
            _local.setdefault(slot.game_id, {})[slot.member] = now + lease
    except Exception:
        log.warning("a stream of game %s not renewed: Redis is unavailable", slot.game_id, exc_info=True)


def stream_slot_give_back(slot: StreamSlot) -> None:
    """The stream has ended. Giving a slot back twice is harmless."""
    try:
        if settings.REDIS_URL:
            redis_client().zrem(_key(slot.game_id), slot.member)
            return
        with _lock:
            slots = _local.get(slot.game_id, {})
            slots.pop(slot.member, None)
            if not slots:
                _local.pop(slot.game_id, None)
    except Exception:
        log.warning("a stream of game %s not given back: Redis is unavailable", slot.game_id, exc_info=True)


def _take_script():
    global _script
    with _lock:
        if _script is None:
            _script = redis_client().register_script(TAKE)
        return _script


def _local_take(slot: StreamSlot, now: float, lease: float, limit: int) -> bool:
    with _lock:
        slots = _local.setdefault(slot.game_id, {})
        for member in [member for member, lapses in slots.items() if lapses <= now]:
            del slots[member]
        if len(slots) >= limit:
            return False
        slots[slot.member] = now + lease
        return True
