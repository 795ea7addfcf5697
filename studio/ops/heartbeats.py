"""The Celery workers' heartbeats: each worker records that it is alive
every HEARTBEAT_SECONDS, from a thread of its own, in a sorted set in Redis
(one per deployment, under its channel prefix) scored with Redis's clock —
so hosts whose clocks differ still agree on how long ago a worker was
heard. A worker that stops cleanly takes itself out at once; one that died
ages, and is forgotten after FORGET_SECONDS. /readyz and /metrics read
them (studio/ops/health.py, studio/ops/metrics.py).
"""

import logging
import threading

from django.conf import settings

from studio.runtime.redisconn import redis_client

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 10.0
# A worker heard from this recently is live.
WORKER_LIVE_SECONDS = 60
# A worker silent this long is forgotten (its age no longer reported).
FORGET_SECONDS = 3600

# KEYS[1]: the workers' set; ARGV: the worker, how long one is remembered.
HEARTBEAT = """
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('EXPIRE', KEYS[1], ARGV[2])
"""

# KEYS[1]: the workers' set. Redis's time, then each worker and when it was last heard.
HEARD = """
local time = redis.call('TIME')
return {string.format('%d.%06d', time[1], time[2]), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}
"""

_stop = threading.Event()


def workers_key() -> str:
    return f"{settings.CHANNEL_PREFIX}:workers"


def worker_heartbeat(name: str) -> None:
    """Worker `name` is alive now."""
    redis_client().eval(HEARTBEAT, 1, workers_key(), name, FORGET_SECONDS)


def worker_heartbeats_start(name: str) -> None:
    """Say worker `name` is alive now and every HEARTBEAT_SECONDS, from a
    thread of its own — a compaction running in the worker's main thread
    does not silence it — until `worker_heartbeats_stop`."""
    if not settings.REDIS_URL:
        return
    _stop.clear()
    threading.Thread(target=_beat, args=(name,), name="worker-heartbeat", daemon=True).start()


def worker_heartbeats_stop(name: str) -> None:
    """Worker `name` stops: it is no longer counted, from now."""
    _stop.set()
    if not settings.REDIS_URL:
        return
    try:
        redis_client().zrem(workers_key(), name)
    except Exception:  # it is no longer live after WORKER_LIVE_SECONDS anyway
        log.warning("could not record that worker %s stops: Redis is unavailable", name)


def _beat(name: str) -> None:
    failing = False
    while not _stop.is_set():
        try:
            worker_heartbeat(name)
            if failing:
                log.info("worker %s's heartbeat is recorded again", name)
            failing = False
        except Exception:
            if not failing:  # once per outage, not every beat
                log.warning(
                    "worker %s's heartbeat cannot be recorded: Redis is unavailable", name, exc_info=True
                )
            failing = True
        _stop.wait(HEARTBEAT_SECONDS)


def workers_heard(client) -> dict[str, float]:
    """Each worker heard from in the last FORGET_SECONDS, and how many
    seconds ago (by Redis's clock), read with `client`."""
    now, heard = client.eval(HEARD, 1, workers_key())
    return {
        name.decode(): max(0.0, float(now) - float(score))
        for name, score in zip(heard[::2], heard[1::2], strict=True)
    }
