"""Sends per API key (STUDIO_SEND_RATE, e.g. "100/s"); past it, 429
`rate_limited` with Retry-After.

With Redis (REDIS_URL) the count is a sliding window kept in Redis by one
script call per send — atomic, so the limit holds exactly across web
processes and threads, and one round trip on a connection from a pool the
whole process shares. Without Redis (the embedded default) DRF's own
throttle counts in the process's cache.
"""

import logging
import threading
import time
import uuid

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger(__name__)

# KEYS[1]: the key's window; ARGV: now (s), window length (s), limit, a unique member.
# Returns {1, 0} when the send is let through (and counted), or {0, seconds
# until the oldest counted send leaves the window}.
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

_client_lock = threading.Lock()
_script = None


def _window_script():
    """The registered script on a process-wide Redis client (its connection
    pool is shared by every thread), or None without Redis."""
    global _script
    if not settings.REDIS_URL:
        return None
    with _client_lock:
        if _script is None:
            import redis

            client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
            _script = client.register_script(SLIDING_WINDOW)
        return _script


class SendRateThrottle(SimpleRateThrottle):
    scope = "send"

    def get_rate(self):
        # Read per request (DRF reads its rates once, at import).
        return settings.STUDIO["SEND_RATE"]

    def get_cache_key(self, request, view):
        if request.auth is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.prefix}

    def allow_request(self, request, view):
        # A limit that cannot be counted (Redis down) lets the send through:
        # the limit protects the studio, it must not take it down.
        try:
            script = _window_script()
            if script is None:
                return super().allow_request(request, view)
            return self._allow_in_redis(script, request, view)
        except Exception:
            log.warning("send rate not checked: the cache is unavailable", exc_info=True)
            return True

    def _allow_in_redis(self, script, request, view) -> bool:
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        key = self.get_cache_key(request, view)
        if self.rate is None or key is None:
            return True
        allowed, wait = script(
            keys=[f"{settings.CHANNEL_PREFIX}:{key}"],
            args=[time.time(), self.duration, self.num_requests, uuid.uuid4().hex],
        )
        self._redis_wait = None if allowed else max(float(wait), 0.001)
        return bool(allowed)

    def wait(self):
        redis_wait = getattr(self, "_redis_wait", None)
        return redis_wait if redis_wait is not None else super().wait()
