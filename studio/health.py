"""Is this process alive, and can it serve? The answers behind /healthz and
/readyz.

Liveness touches nothing: a process that answers is alive, whatever its
database does (restarting it would not bring the database back).
Readiness checks what a request needs — the database, Redis and the Celery
broker — at once, each given CHECK_SECONDS: a check that hangs is reported
as timed out, never waited for. A probe may come from anyone, as often as
it likes: the result is kept for KEEP_SECONDS (callers meanwhile share it),
and the checks run on a few threads kept for them, a check still running
from before being reported as timed out rather than started again — so a
flood of probes opens no connection or thread per request.
"""

import functools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait

from django.conf import settings
from django.db import connections

CHECK_SECONDS = 1.0
KEEP_SECONDS = 1.0
NOT_USED = "not used"
OK = "ok"

_lock = threading.Lock()
_kept: tuple[float, bool, dict] | None = None
_executor = ThreadPoolExecutor(max_workers=3, thread_name_prefix="readiness")
_running: dict[str, Future] = {}


def liveness() -> dict:
    return {"status": "ok"}


def readiness() -> tuple[bool, dict]:
    """(ready, {"status", "checks": {name: "ok" | "not used" | why not}}),
    checked at most once per KEEP_SECONDS."""
    global _kept
    with _lock:  # who comes while a check runs waits for its result
        if _kept is None or time.monotonic() - _kept[0] >= KEEP_SECONDS:
            _kept = (time.monotonic(), *_readiness_check())
        return _kept[1], _kept[2]


def readiness_forget() -> None:
    """Check afresh at the next call (for tests that change what is checked)."""
    global _kept
    with _lock:
        _kept = None


def _readiness_check() -> tuple[bool, dict]:
    checks = _run_bounded(
        {"database": _database_check, "redis": _redis_check, "broker": _broker_check}, CHECK_SECONDS
    )
    ready = all(result in (OK, NOT_USED) for result in checks.values())
    return ready, {"status": "ok" if ready else "unavailable", "checks": checks}


def _run_bounded(checks: dict, seconds: float) -> dict:
    """Each check's result, run in parallel; one still running after
    `seconds` — or still running from an earlier call, and so not started
    again — is "timed out"."""
    for name, check in checks.items():
        if name not in _running or _running[name].done():
            _running[name] = _executor.submit(_run_one, check)
    futures = {name: _running[name] for name in checks}
    wait(futures.values(), timeout=seconds)
    timed_out = f"timed out after {seconds:g} s"
    return {name: future.result() if future.done() else timed_out for name, future in futures.items()}


def _run_one(check) -> str:
    try:
        return check()
    except Exception as error:
        return f"unreachable: {_reason(error)}"


def _reason(error: Exception) -> str:
    first_line = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first_line}"[:200]


def _database_check() -> str:
    connection = connections["default"]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        # This thread's own connection (or the pool's, handed back).
        connection.close()
    return OK


def _redis_check() -> str:
    if not settings.REDIS_URL:
        return NOT_USED
    _redis_of(settings.REDIS_URL).ping()
    return OK


@functools.lru_cache(maxsize=4)
def _redis_of(url: str):
    """One client per Redis checked (its connection kept between checks),
    which answers within CHECK_SECONDS or fails: no retries."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(
        url, socket_connect_timeout=CHECK_SECONDS, socket_timeout=CHECK_SECONDS, retry=Retry(NoBackoff(), 0)
    )


def _broker_check() -> str:
    """The broker the web process hands compactions to; not used when
    compactions run elsewhere (a thread, inline)."""
    if settings.STUDIO["COMPACTION_RUNNER"] != "celery" or settings.CELERY_BROKER_URL.startswith("memory"):
        return NOT_USED
    from .celery import app

    with app.connection_for_write(settings.CELERY_BROKER_URL, connect_timeout=CHECK_SECONDS) as connection:
        connection.ensure_connection(max_retries=0, timeout=CHECK_SECONDS)
    return OK
