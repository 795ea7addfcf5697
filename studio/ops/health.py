"""Is this process alive, and can it serve? The answers behind /healthz and
/readyz.

Liveness touches nothing: a process that answers is alive, whatever its
database does (restarting it would not bring the database back).

Readiness is whether this process can serve sends: not when the database
is unreachable, when the code has migrations the database lacks (every
request would fail), or when the process is shutting down — then a load
balancer should send its requests elsewhere. What sends do without — Redis
(events, rate windows, wake-ups), the Celery broker and its workers
(compactions) — makes the answer `degraded`, never unready: were it
otherwise, Redis going down would take every web process out of the pool
together, though each could still serve.

The checks run at once, each given CHECK_SECONDS: a check that hangs is
reported as timed out, never waited for. A probe may come from anyone, as
often as it likes: the result is kept for KEEP_SECONDS (callers meanwhile
share it), and the checks run on threads kept for them, one per check, a
check still running from before being reported as timed out rather than
started again — so a flood of probes opens no connection or thread per
request. The migrations are looked at again only every
MIGRATIONS_CHECK_SECONDS.

Readiness lists the Celery workers whose heartbeat (studio/ops/heartbeats.py)
was heard in the last WORKER_LIVE_SECONDS.
"""

import functools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait

from django.conf import settings
from django.db import connections

from studio import __version__
from studio.ops.heartbeats import WORKER_LIVE_SECONDS, workers_heard
from studio.serving.lifecycle import is_shutting_down

CHECK_SECONDS = 1.0
KEEP_SECONDS = 1.0
MIGRATIONS_CHECK_SECONDS = 10.0
NOT_USED = "not used"
OK = "ok"
SHUTTING_DOWN = "shutting down"

# What a process needs to serve sends, and what it serves them without.
NEEDED = ("database", "migrations", "process")
WANTED = ("redis", "broker", "workers")

_lock = threading.Lock()
_kept: tuple[float, dict] | None = None
_migrations_kept: tuple[float, str] | None = None
_executor = ThreadPoolExecutor(max_workers=5, thread_name_prefix="readiness")
_running: dict[str, Future] = {}


def liveness() -> dict:
    return {"status": "ok", "version": __version__}


def readiness() -> tuple[bool, dict]:
    """(ready, {"status": "ok" | "degraded" | "unavailable", "degraded",
    "checks": {name: "ok" | "not used" | why not}, "workers": [...]}),
    checked at most once per KEEP_SECONDS (shutting down at every call)."""
    global _kept
    with _lock:  # who comes while a check runs waits for its result
        if _kept is None or time.monotonic() - _kept[0] >= KEEP_SECONDS:
            _kept = (time.monotonic(), _checks_run())
        results = _kept[1]
    checks = {**results["checks"], "process": SHUTTING_DOWN if is_shutting_down() else OK}
    ready = all(checks[name] == OK for name in NEEDED)
    degraded = any(checks[name] not in (OK, NOT_USED) for name in WANTED)
    status = "unavailable" if not ready else "degraded" if degraded else "ok"
    return ready, {"status": status, "degraded": degraded, "checks": checks, "workers": results["workers"]}


def readiness_forget() -> None:
    """Check afresh at the next call (for tests that change what is checked)."""
    global _kept, _migrations_kept
    with _lock:
        _kept = _migrations_kept = None


def _checks_run() -> dict:
    checks = _run_bounded(
        {
            "database": _database_check,
            "migrations": _migrations_check,
            "redis": _redis_check,
            "broker": _broker_check,
            "workers": _workers_check,
        },
        CHECK_SECONDS,
    )
    workers = checks["workers"]
    if isinstance(workers, list):
        checks["workers"] = OK if workers else f"none seen in the last {WORKER_LIVE_SECONDS} s"
    return {"checks": checks, "workers": workers if isinstance(workers, list) else []}


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


def _migrations_check() -> str:
    """Whether every migration of this code is applied: looked at again
    once MIGRATIONS_CHECK_SECONDS have passed (an answer that could not be
    had — the database away — is not kept)."""
    global _migrations_kept
    kept = _migrations_kept
    if kept is None or time.monotonic() - kept[0] >= MIGRATIONS_CHECK_SECONDS:
        not_applied = _migrations_not_applied()
        shown = ", ".join(not_applied[:3]) + (", …" if len(not_applied) > 3 else "")
        kept = _migrations_kept = (
            time.monotonic(),
            f"{len(not_applied)} not applied: {shown}" if not_applied else OK,
        )
    return kept[1]


def _migrations_not_applied() -> list[str]:
    """The migrations `migrate` would apply, as app.name."""
    from django.db.migrations.executor import MigrationExecutor

    connection = connections["default"]
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    finally:
        connection.close()
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


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
    from studio.celery import app

    with app.connection_for_write(settings.CELERY_BROKER_URL, connect_timeout=CHECK_SECONDS) as connection:
        connection.ensure_connection(max_retries=0, timeout=CHECK_SECONDS)
    return OK


def _workers_check() -> list[dict] | str:
    """The Celery workers seen in the last WORKER_LIVE_SECONDS, when
    compactions run on Celery."""
    if not settings.REDIS_URL or settings.STUDIO["COMPACTION_RUNNER"] != "celery":
        return NOT_USED
    ages = workers_seen()
    return [
        {"name": name, "seenSecondsAgo": round(age, 1)}
        for name, age in sorted(ages.items())
        if age <= WORKER_LIVE_SECONDS
    ]


def workers_seen() -> dict[str, float]:
    """Each worker heard from lately and how many seconds ago, read within
    CHECK_SECONDS or not at all (an exception)."""
    return workers_heard(_redis_of(settings.REDIS_URL))
