"""The studio's Prometheus metrics, and the small functions the domain
calls when something happens (a turn ends, a model answers, credits are
charged…). Each is a counter or histogram update in memory — no I/O on a
send's path.

Several processes (web processes, Celery workers) count into one set of
numbers through prometheus-client's multiprocess mode: with
PROMETHEUS_MULTIPROC_DIR set (the same directory for every process of the
host, emptied when they all start), each process writes its values to
files there and a scrape of any web process sums them. Without it a
process serves its own numbers only.
"""

import atexit
import logging
import os
import platform
import re
import threading
import weakref
from concurrent.futures import Future
from dataclasses import dataclass

from django.conf import settings
from django.db.backends.signals import connection_created
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from studio import __version__
from studio.ops import (
    health,
    process_metrics,  # noqa: F401 — its metrics, in this registry too
)
from studio.ops.heartbeats import WORKER_LIVE_SECONDS

log = logging.getLogger(__name__)

# The classic text format: every Prometheus version reads it.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

MULTIPROC_DIR = settings.PROMETHEUS_MULTIPROC_DIR
if MULTIPROC_DIR:
    # Metrics write their files as they are defined, just below.
    os.makedirs(MULTIPROC_DIR, exist_ok=True)

SHORT = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
LONG = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
REQUEST = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

# `errorCode`: a failed turn's code, as its `errorCode` on the wire ("" for
# the others) — one of the studio's own few, never a provider's words.
TURNS = Counter(
    "studio_turns", "Turns ended, by how they ended and a failed one's error code.", ["status", "errorCode"]
)
TURN_SECONDS = Histogram(
    "studio_turn_seconds", "Seconds from a send to the end of its turn (waiting included).", buckets=LONG
)
MODEL_CALL_SECONDS = Histogram(
    "studio_model_call_seconds", "Seconds a turn's model call took, by provider.", ["provider"], buckets=SHORT
)
MODEL_TOKENS = Counter(
    "studio_model_tokens",
    "Tokens the models reported, turns and compactions (input/output/cached).",
    ["kind"],
)
CREDITS_CHARGED = Counter(
    "studio_credits_charged", "Credits charged once committed, by cost line kind.", ["kind"]
)
CREDITS_WRITTEN_OFF = Counter(
    "studio_credits_written_off",
    "Credits a provider billed past what a game's balance had left: not charged, the balance kept at zero.",
)
# livesum: the sum over the processes still running (one that exits takes
# its share with it).
SENDS_QUEUED = Gauge(
    "studio_sends_queued", "Sends waiting behind a running turn now.", multiprocess_mode="livesum"
)
COMPACTIONS = Counter(
    "studio_compactions",
    "Compaction attempts ended: done, retried or failed (for good), and a failed one's error code.",
    ["status", "errorCode"],
)
COMPACTION_SECONDS = Histogram(
    "studio_compaction_seconds", "Seconds one compaction attempt ran.", buckets=LONG
)
WS_CONNECTIONS = Gauge(
    "studio_ws_connections", "WebSocket listeners connected now.", multiprocess_mode="livesum"
)
SSE_STREAMS = Gauge(
    "studio_sse_streams",
    "Server-sent event answers streaming now (streamed sends and a turn's events).",
    multiprocess_mode="livesum",
)
EVENT_PUBLISH_FAILURES = Counter(
    "studio_event_publish_failures",
    "Live events that could not be published (Redis away): their listeners missed them.",
)
MODEL_CALL_ERRORS = Counter(
    "studio_model_call_errors",
    "Model calls that failed, turns and compactions, by provider and kind of failure.",
    ["provider", "kind"],
)
HTTP_REQUEST_SECONDS = Histogram(
    "studio_http_request_seconds",
    "Seconds from a request's arrival to its response's status line, by route kind and status class.",
    ["route", "status"],
    buckets=REQUEST,
)
DB_POOL_WAITS = Counter(
    "studio_db_pool_waits", "Requests for a pooled database connection that found none free and waited."
)
DB_POOL_WAIT_SECONDS = Counter(
    "studio_db_pool_wait_seconds", "Seconds requests waited for a pooled database connection."
)
DB_POOL_TIMEOUTS = Counter(
    "studio_db_pool_timeouts",
    "Requests that gave up waiting for a pooled connection (STUDIO_DB_POOL_TIMEOUT).",
)


# --- what the domain calls ------------------------------------------------------------


def turn_ended(status: str, code: str, seconds: float) -> None:
    TURNS.labels(status, code).inc()
    TURN_SECONDS.observe(seconds)


def model_call_ended(provider: str, seconds: float) -> None:
    MODEL_CALL_SECONDS.labels(provider).observe(seconds)


def model_call_failed(model: str, kind: str) -> None:
    """`kind`: `ProviderError.kind`, one of a few."""
    MODEL_CALL_ERRORS.labels(model.partition(":")[0], kind).inc()


def model_tokens_used(usage) -> None:
    """`usage`: a model call's token counts (agents.providers.base.Usage)."""
    MODEL_TOKENS.labels("input").inc(usage.input_tokens)
    MODEL_TOKENS.labels("output").inc(usage.output_tokens)
    MODEL_TOKENS.labels("cached").inc(usage.cached_input_tokens)


def credits_charged(kind: str, amount) -> None:
    CREDITS_CHARGED.labels(kind).inc(float(amount))


def credits_written_off(amount) -> None:
    CREDITS_WRITTEN_OFF.inc(float(amount))


def send_queued() -> None:
    SENDS_QUEUED.inc()


def send_dequeued() -> None:
    SENDS_QUEUED.dec()


def compaction_ended(status: str, code: str, seconds: float) -> None:
    COMPACTIONS.labels(status, code).inc()
    COMPACTION_SECONDS.observe(seconds)


def ws_connected() -> None:
    WS_CONNECTIONS.inc()


def ws_disconnected() -> None:
    WS_CONNECTIONS.dec()


def sse_opened() -> None:
    SSE_STREAMS.inc()


def sse_closed() -> None:
    SSE_STREAMS.dec()


def event_publish_failed() -> None:
    EVENT_PUBLISH_FAILURES.inc()


# --- HTTP requests ----------------------------------------------------------------------

# What a route is, by its path: a few kinds, never the path itself (a
# label per agent or turn would grow without bound). Sends and event
# streams apart from the rest of the API: they wait on models.
ROUTE_KINDS = (
    (re.compile(r"/api/v1/agents/[^/]+/messages"), "send"),
    (re.compile(r"/api/v1/agents/[^/]+/turns/[^/]+/events"), "events"),
    (re.compile(r"/api/.*"), "api"),
    (re.compile(r"/(healthz|readyz|metrics)"), "ops"),
    (re.compile(r"/static/.*"), "static"),
    (re.compile(r"/admin/.*"), "admin"),
    (re.compile(r"/(studio/.*)?"), "page"),
)


def route_kind(path: str) -> str:
    for pattern, kind in ROUTE_KINDS:
        if pattern.fullmatch(path):
            return kind
    return "other"


def status_class(status: int) -> str:
    return f"{status // 100}xx"


def request_answered(path: str, status: int, seconds: float) -> None:
    """An HTTP request answered `status` after `seconds` (to its status line)."""
    HTTP_REQUEST_SECONDS.labels(route_kind(path), status_class(status)).observe(seconds)


# --- the database connection pool ----------------------------------------------------

# psycopg_pool's own counters: requests that waited, the milliseconds they
# waited, and those that gave up. Each process reads its pool's as they
# move — when it takes a connection — and counts what they moved by.
POOL_COUNTERS = ("requests_queued", "requests_wait_ms", "requests_errors")
_pool_counts_read: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_pool_counts_lock = threading.Lock()


def db_pool_read(pool) -> None:
    """Count what `pool`'s wait counters moved by since they were last read."""
    stats = pool.get_stats()
    now = {name: stats.get(name, 0) for name in POOL_COUNTERS}
    with _pool_counts_lock:
        before = _pool_counts_read.get(pool, dict.fromkeys(POOL_COUNTERS, 0))
        _pool_counts_read[pool] = now
    moved = {name: max(now[name] - before[name], 0) for name in POOL_COUNTERS}
    DB_POOL_WAITS.inc(moved["requests_queued"])
    DB_POOL_WAIT_SECONDS.inc(moved["requests_wait_ms"] / 1000)
    DB_POOL_TIMEOUTS.inc(moved["requests_errors"])


def _connection_taken(sender, connection, **kwargs) -> None:
    pool = getattr(connection, "pool", None)  # None unless STUDIO_DB_POOL (and on SQLite)
    if pool is not None:
        db_pool_read(pool)


connection_created.connect(_connection_taken, dispatch_uid="studio.ops.metrics.db_pool")


# --- the scrape ------------------------------------------------------------------------

# What the database says is read on a thread of its own, given this long:
# a scrape while the database is away (or hangs) answers in bounded time,
# without the gauges read from it, and with studio_database_up 0. A read
# still running from an earlier scrape is not started again, so scrapes
# during an outage pile up no threads. (A daemon thread: one stuck on the
# database never holds a stopping process.)
DATABASE_SECONDS = 2.0
_database_running: Future | None = None
_database_lock = threading.Lock()


def database_text() -> bytes:
    """What the database says now, read at each scrape (the same whichever
    process is scraped): how long the oldest queued send and the oldest
    unfinished compaction have waited, the credits held, each periodic
    job's last run and the lowest balances — or, when the database cannot
    answer within DATABASE_SECONDS, none of them."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_DatabaseNow(_database_read()))
    return generate_latest(registry)


def _database_read() -> "DatabaseNow | None":
    global _database_running
    with _database_lock:
        if _database_running is None or _database_running.done():
            _database_running = Future()
            threading.Thread(
                target=_database_read_into, args=(_database_running,), name="metrics-database", daemon=True
            ).start()
        running = _database_running
    try:
        return running.result(timeout=DATABASE_SECONDS)
    except Exception as error:  # timed out, or the database refused
        log.warning("metrics: the database could not be read: %s", str(error) or type(error).__name__)
        return None


def _database_read_into(future: Future) -> None:
    from django.db import connection

    try:
        future.set_result(_database_now())
    except BaseException as error:
        future.set_exception(error)
    finally:
        connection.close()  # this thread's own (or the pool's, handed back)


@dataclass
class DatabaseNow:
    sends_oldest: float
    compactions_oldest: float
    held: float
    jobs: dict  # job -> its last run (a datetime)
    balances: list  # (game slug, balance), lowest first


class _DatabaseNow:
    def __init__(self, now: DatabaseNow | None):
        self.now = now

    def collect(self):
        now = self.now
        yield GaugeMetricFamily(
            "studio_database_up",
            "1 when this scrape read the database (the gauges read from it are here), 0 when it could not.",
            value=0 if now is None else 1,
        )
        if now is None:
            return
        yield GaugeMetricFamily(
            "studio_send_queue_oldest_seconds",
            "Seconds the oldest send queued behind a running turn has waited (0: none waits).",
            value=now.sends_oldest,
        )
        yield GaugeMetricFamily(
            "studio_compaction_queue_oldest_seconds",
            "Seconds since the oldest compaction not yet done was asked for, queued or running "
            "(not those waiting for credits; 0: none).",
            value=now.compactions_oldest,
        )
        yield GaugeMetricFamily(
            "studio_credits_held",
            "Credits held now on every game's account, for live turns and compactions.",
            value=now.held,
        )
        runs = GaugeMetricFamily(
            "studio_last_run_timestamp_seconds",
            "When each periodic job last ran (Unix time): beat sending the sweep, the sweep, prune, "
            "backup, a backup restored and checked.",
            labels=["job"],
        )
        for job, at in sorted(now.jobs.items()):
            runs.add_metric([job], at.timestamp())
        yield runs
        balances = GaugeMetricFamily(
            "studio_game_balance_credits",
            f"The balance of the {settings.STUDIO['METRICS_GAMES']} games with the lowest balances.",
            labels=["game"],
        )
        for game, balance in now.balances:
            balances.add_metric([game], balance)
        yield balances


def _database_now() -> DatabaseNow:
    from django.db.models import Min, OuterRef, Subquery, Sum
    from django.utils import timezone

    from agents.models import Agent, Compaction, CompactionStatus, Turn, TurnStatus
    from billing.models import Account
    from studio.ops.jobs import jobs_last_run

    # Per agent, its first queued turn (the index on agent, status, id),
    # only for games with live turns (each live turn counts in its account).
    first_queued = Turn.objects.filter(agent=OuterRef("pk"), status=TurnStatus.QUEUED).order_by("id")
    sends = (
        Agent.objects.filter(game__account__live_turns__gt=0)
        .annotate(queued_at=Subquery(first_queued.values("created_at")[:1]))
        .aggregate(oldest=Min("queued_at"))["oldest"]
    )
    compactions = Compaction.objects.filter(
        status__in=[CompactionStatus.QUEUED, CompactionStatus.RUNNING], awaits_credits=False
    ).aggregate(oldest=Min("created_at"))["oldest"]
    held = Account.objects.aggregate(held=Sum("held"))["held"]
    lowest = settings.STUDIO["METRICS_GAMES"]
    balances = Account.objects.order_by("balance", "game_id").values_list("game__slug", "balance")[:lowest]
    now = timezone.now()

    def waited(since) -> float:
        return max((now - since).total_seconds(), 0.0) if since else 0.0

    return DatabaseNow(
        sends_oldest=waited(sends),
        compactions_oldest=waited(compactions),
        held=float(held or 0),
        jobs=jobs_last_run(),
        balances=[(slug, float(balance)) for slug, balance in balances] if lowest else [],
    )


def metrics_text() -> bytes:
    """Every metric in the Prometheus text format: summed over the
    processes sharing PROMETHEUS_MULTIPROC_DIR, or this process's own —
    then the build and the workers' heartbeats, read from Redis at each
    scrape."""
    return _processes_text() + generate_latest(_SCRAPE_REGISTRY)


def _processes_text() -> bytes:
    if not MULTIPROC_DIR:
        return generate_latest(REGISTRY)
    _forget_dead_processes(MULTIPROC_DIR)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=MULTIPROC_DIR)
    return generate_latest(registry)


class _WorkersCollector:
    """The Celery workers as their heartbeats in Redis say (studio/ops/heartbeats.py):
    the same numbers from every web process of every host, not a sum over
    processes. Nothing when Redis cannot be read: an absent series, not a
    false zero."""

    def collect(self):
        if not settings.REDIS_URL:
            return
        try:
            ages = health.workers_seen()
        except Exception:
            return
        live = sum(1 for age in ages.values() if age <= WORKER_LIVE_SECONDS)
        yield GaugeMetricFamily(
            "studio_workers_live",
            f"Celery workers whose heartbeat was seen in the last {WORKER_LIVE_SECONDS} seconds.",
            value=live,
        )
        family = GaugeMetricFamily(
            "studio_worker_heartbeat_age_seconds",
            "Seconds since each worker's last heartbeat (workers heard from in the last hour).",
            labels=["worker"],
        )
        for name, age in sorted(ages.items()):
            family.add_metric([name], age)
        yield family


class _BuildCollector:
    """The release running: `studio_build_info{version} 1` (studio.__version__)."""

    def collect(self):
        family = GaugeMetricFamily(
            "studio_build_info",
            "The studio's release (version) this process runs.",
            labels=["version", "python"],
        )
        family.add_metric([__version__, platform.python_version()], 1)
        yield family


_SCRAPE_REGISTRY = CollectorRegistry(auto_describe=False)
_SCRAPE_REGISTRY.register(_BuildCollector())
_SCRAPE_REGISTRY.register(_WorkersCollector())


LIVE_GAUGE_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db")


def _forget_dead_processes(path: str) -> None:
    """Drop the live gauges of processes that ended without saying so (a
    crash, a killed worker): a dead process has no sends waiting and no
    sockets open. Counters and histograms keep their counts."""
    pids = {int(m.group(1)) for name in os.listdir(path) if (m := LIVE_GAUGE_FILE.fullmatch(name))}
    for pid in pids:
        if not _is_running(pid):
            multiprocess.mark_process_dead(pid, path)


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _mark_this_process_dead() -> None:
    multiprocess.mark_process_dead(os.getpid(), MULTIPROC_DIR)


if MULTIPROC_DIR:
    atexit.register(_mark_this_process_dead)
