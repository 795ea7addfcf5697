"""Sliding windows that count events per subject — sends, definitions,
failed sign-ins — and the rates built on them.

The send rate (STUDIO_SEND_RATE, e.g. "100/s", parsed in settings): per
API key for the API, per signed-in user for the studio's pages; past it,
429 `rate_limited` with Retry-After. The definition rate
(STUDIO_DEFINITION_RATE): per game, the definitions that write a config
revision (`agents.services.definition_paced`). Failed sign-ins:
studio/auth/signin.py.

With Redis (REDIS_URL) a window is a sorted set kept in Redis, counted by
one script call per event — atomic, so a limit holds exactly across web
processes and threads, and one round trip on a connection from a pool the
whole process shares. Without Redis (the embedded default: one process)
the window is kept in this process's cache, under a lock.

A limit that cannot be counted (Redis down) lets the event through: the
limit protects the studio, it must not take it down.
"""

import logging
import threading
import time
import uuid

from django.conf import settings
from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

from studio.runtime.redisconn import lean_client, redis_client

log = logging.getLogger(__name__)

# KEYS[1]: the window; ARGV: now (s), window length (s), limit, a unique
# member. Returns {1, 0} when the event is let through (and counted), or
# {0, seconds until the oldest counted event leaves the window}.
SLIDING_WINDOW = """
local key = KEYS[1]
local now, duration, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - duration)
if redis.call('ZCARD', key) >= limit then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, tostring(tonumber(oldest[2]) + duration - now)}
end
redis.call('ZADD', key, now, ARGV[4])
redis.call('PEXPIRE', key, math.ceil(duration * 1000))
return {1, '0'}
"""

_lock = threading.Lock()
_script = None


def _window_script():
    """The registered script on the process's Redis client, or None
    without Redis."""
    global _script
    if not settings.REDIS_URL:
        return None
    with _lock:
        if _script is None:
            _script = lean_client().script(SLIDING_WINDOW)
        return _script


def window_take(key: str, *, limit: int, seconds: float, member: str | None = None) -> float | None:
    """Count one event in window `key` (as `member`, to give it back later)
    unless `limit` events were counted in the last `seconds`: None when it
    was counted, else the seconds until one leaves the window."""
    now, member = time.time(), member or uuid.uuid4().hex
    try:
        script = _window_script()
        if script is not None:
            allowed, wait = script(keys=[key], args=[now, seconds, limit, member])
            return None if allowed else max(float(wait), 0.001)
        with _lock:
            events = [(t, m) for t, m in cache.get(key, []) if t > now - seconds]
            if len(events) >= limit:
                return max(events[0][0] + seconds - now, 0.001)
            cache.set(key, [*events, (now, member)], seconds)
            return None
    except Exception:
        log.warning("%s not counted: the cache is unavailable", key, exc_info=True)
        return None


def window_give_back(key: str, member: str, *, seconds: float) -> None:
    """Uncount the event counted as `member` in window `key` (of `seconds`)."""
    try:
        if settings.REDIS_URL:
            redis_client().zrem(key, member)
            return
        with _lock:
            events = [(t, m) for t, m in cache.get(key, []) if m != member]
            cache.set(key, events, seconds)
    except Exception:
        log.warning("%s not given back: the cache is unavailable", key, exc_info=True)


def window_clear(key: str) -> None:
    """Forget every event counted in window `key`."""
    try:
        if settings.REDIS_URL:
            redis_client().delete(key)
        else:
            cache.delete(key)
    except Exception:
        log.warning("%s not cleared: the cache is unavailable", key, exc_info=True)


def send_window(sender: str) -> str:
    """The window that counts the sends of `sender` ("key:<prefix>", "user:<id>")."""
    return f"{settings.CHANNEL_PREFIX}:sends:{sender}"


def send_wait(sender: str) -> float | None:
    """Count a send by `sender`: None when it may go now, else the seconds
    until it may."""
    limit, seconds = settings.STUDIO["SEND_RATE"]
    return window_take(send_window(sender), limit=limit, seconds=seconds)


def definition_window(game_id: int) -> str:
    """The window that counts the definitions of game `game_id` that write."""
    return f"{settings.CHANNEL_PREFIX}:definitions:game:{game_id}"


def definition_wait(game_id: int) -> float | None:
    """Count a definition that writes in game `game_id`: None when it may
    go now, else the seconds until it may."""
    limit, seconds = settings.STUDIO["DEFINITION_RATE"]
    return window_take(definition_window(game_id), limit=limit, seconds=seconds)


class SendRateThrottle(BaseThrottle):
    """The API's sends, per key (DRF turns a refusal into 429 with Retry-After)."""

    def allow_request(self, request, view):
        if request.auth is None:
            return True
        self._wait = send_wait(f"key:{request.auth.prefix}")
        return self._wait is None

    def wait(self):
        return self._wait
