"""Places counted across every web process, each held for a while: a
game's live streams, and the sends waiting for an agent's turn to end
(studio.runtime.wakeups: held, not limited). (The requests that follow a
send's turn are counted on the turn's row: agents.sending.turn_slot.)

A place is an entry in a sorted set in Redis (without Redis, in this
process), scored with the time it lapses. Its holder renews it while it
stays and gives it back however it ends; one whose process died without
giving it back lapses after its lease, so a crash frees places within
minutes, never leaks them for good. A set is counted and added to in one
script call (on the lean connections of studio.runtime.redisconn), so a
limit holds exactly across processes.

A place that cannot be counted (Redis down) is let through: the limits
protect the studio, they must not take it down.

- Streams: WebSocket listeners (game code's and the studio pages') and
  server-sent event answers of one game together, at most
  STUDIO_MAX_STREAMS_PER_GAME (200); past it a new stream is refused with
  TooManyStreams (429 with Retry-After; a WebSocket closes with 4429).
"""

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from studio.errors import DomainError
from studio.runtime.redisconn import lean_client, redis_client

log = logging.getLogger(__name__)

# KEYS[1]: the set; ARGV: now, lease (s), limit, the new place.
# Returns 1 when the place was taken, 0 when the set is full.
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

# A limit no set reaches: `slot_take`'s without one.
UNLIMITED = 2**53

_lock = threading.Lock()
_script = None
# Without Redis: set → {place: when it lapses}.
_local: dict[str, dict[str, float]] = {}


@dataclass(frozen=True)
class Slot:
    key: str
    member: str


def slots_key(*parts) -> str:
    return ":".join([settings.CHANNEL_PREFIX, "slots", *map(str, parts)])


def slot_take(key: str, *, limit: int | None, lease: float) -> Slot | None:
    """A place in set `key`, held for `lease` seconds unless renewed, or
    None when `limit` places are held already (None: no limit)."""
    slot, now = Slot(key, uuid.uuid4().hex), time.time()
    try:
        if settings.REDIS_URL:
            most = UNLIMITED if limit is None else limit
            taken = _take_script()(keys=[key], args=[now, lease, most, slot.member])
        else:
            taken = _local_take(slot, now, lease, limit)
    except Exception:
        log.warning("%s not counted: Redis is unavailable", key, exc_info=True)
        return slot
    return slot if taken else None


def slot_renew(slot: Slot, *, lease: float) -> None:
    """Keep a place still held (taking it again if it lapsed meanwhile:
    Redis restarted, say)."""
    now = time.time()
    try:
        if settings.REDIS_URL:
            pipe = redis_client().pipeline()
            pipe.zadd(slot.key, {slot.member: now + lease})
            pipe.pexpire(slot.key, int(lease * 1000))
            pipe.execute()
            return
        with _lock:
            _local.setdefault(slot.key, {})[slot.member] = now + lease
    except Exception:
        log.warning("%s not renewed: Redis is unavailable", slot.key, exc_info=True)


def slot_give_back(slot: Slot) -> None:
    """The place is no longer held. Giving one back twice is harmless."""
    try:
        if settings.REDIS_URL:
            lean_client().call("ZREM", slot.key, slot.member)
            return
        with _lock:
            places = _local.get(slot.key, {})
            places.pop(slot.member, None)
            if not places:
                _local.pop(slot.key, None)
    except Exception:
        log.warning("%s not given back: Redis is unavailable", slot.key, exc_info=True)


def slots_held(key: str) -> int:
    """How many places of set `key` are held now (0 when it cannot be counted)."""
    now = time.time()
    try:
        if settings.REDIS_URL:
            return redis_client().zcount(key, now, "+inf")
        with _lock:
            return sum(1 for lapses in _local.get(key, {}).values() if lapses > now)
    except Exception:
        log.warning("%s not counted: Redis is unavailable", key, exc_info=True)
        return 0


def _take_script():
    global _script
    with _lock:
        if _script is None:
            _script = lean_client().script(TAKE)
        return _script


def _local_take(slot: Slot, now: float, lease: float, limit: int | None) -> bool:
    with _lock:
        places = _local.setdefault(slot.key, {})
        for member in [member for member, lapses in places.items() if lapses <= now]:
            del places[member]
        if limit is not None and len(places) >= limit:
            return False
        places[slot.member] = now + lease
        return True


# --- a game's streams -------------------------------------------------------------------

# A stream renews its place each STUDIO_WS_REJOIN_SECONDS; a place lapses a
# few renewals after the last one, and never sooner than this.
LEASE_FLOOR_SECONDS = 60.0
RETRY_AFTER_SECONDS = 10


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


def lease_seconds() -> float:
    return max(LEASE_FLOOR_SECONDS, 3 * settings.STUDIO["WS_REJOIN_SECONDS"])


def streams_key(game_id: int) -> str:
    return slots_key("streams", game_id)


def stream_slot_take(game_id: int) -> Slot:
    """A place for a new stream of the game, or TooManyStreams."""
    slot = slot_take(
        streams_key(game_id), limit=settings.STUDIO["MAX_STREAMS_PER_GAME"], lease=lease_seconds()
    )
    if slot is None:
        raise TooManyStreams()
    return slot


def stream_slot_renew(slot: Slot) -> None:
    slot_renew(slot, lease=lease_seconds())


stream_slot_give_back = slot_give_back
