"""One Redis client per process (its connection pool is shared by every
thread), for what the studio keeps in Redis itself: the send-rate windows
and the wake-ups between processes. The channel layer and Celery keep their
own connections."""

import threading

from django.conf import settings

_lock = threading.Lock()
_clients: dict = {}


def redis_client(*, blocking: bool = False):
    """The process's client for REDIS_URL. `blocking`: a second client with
    no read time-out, for a connection that waits on pub/sub."""
    with _lock:
        client = _clients.get(blocking)
        if client is None:
            import redis

            client = redis.Redis.from_url(
                settings.REDIS_URL,
                socket_connect_timeout=1,
                socket_timeout=None if blocking else 1,
                health_check_interval=30 if blocking else 0,
            )
            _clients[blocking] = client
        return client
