"""Is this process alive, and can it serve? The answers behind /healthz and
/readyz.

Liveness touches nothing: a process that answers is alive, whatever its
database does (restarting it would not bring the database back).
Readiness checks what a request needs — the database, Redis and the Celery
broker — each in a thread of its own, at once, each given CHECK_SECONDS:
a check that hangs is reported as timed out, never waited for.
"""

import threading
import time

from django.conf import settings
from django.db import connections

CHECK_SECONDS = 1.0
NOT_USED = "not used"
OK = "ok"


def liveness() -> dict:
    return {"status": "ok"}


def readiness() -> tuple[bool, dict]:
    """(ready, {"status", "checks": {name: "ok" | "not used" | why not}})."""
    checks = _run_bounded(
        {"database": _database_check, "redis": _redis_check, "broker": _broker_check}, CHECK_SECONDS
    )
    ready = all(result in (OK, NOT_USED) for result in checks.values())
    return ready, {"status": "ok" if ready else "unavailable", "checks": checks}


def _run_bounded(checks: dict, seconds: float) -> dict:
    """Each check's result, run in parallel; one still running after
    `seconds` is "timed out" (its thread ends on its own, unwaited)."""
    results: dict = {}
    threads = [
        threading.Thread(target=_run_one, args=(name, check, results), daemon=True, name=f"readiness-{name}")
        for name, check in checks.items()
    ]
    for thread in threads:
        thread.start()
    give_up = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(give_up - time.monotonic(), 0))
    return {name: results.get(name, f"timed out after {seconds:g} s") for name in checks}


def _run_one(name: str, check, results: dict) -> None:
    try:
        results[name] = check()
    except Exception as error:
        results[name] = f"unreachable: {_reason(error)}"


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
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis.from_url(
        settings.REDIS_URL,
        socket_connect_timeout=CHECK_SECONDS,
        socket_timeout=CHECK_SECONDS,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        client.ping()
    finally:
        client.close()
    return OK


def _broker_check() -> str:
    """The broker the web process hands compactions to; not used when
    compactions run elsewhere (a thread, inline)."""
    if settings.STUDIO["COMPACTION_RUNNER"] != "celery" or settings.CELERY_BROKER_URL.startswith("memory"):
        return NOT_USED
    from .celery import app

    with app.connection_for_write(settings.CELERY_BROKER_URL, connect_timeout=CHECK_SECONDS) as connection:
        connection.ensure_connection(max_retries=0, timeout=CHECK_SECONDS)
    return OK
