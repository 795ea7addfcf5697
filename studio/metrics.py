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
import os
import re

from django.conf import settings
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

from . import health
from .heartbeats import WORKER_LIVE_SECONDS

# The classic text format: every Prometheus version reads it.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

MULTIPROC_DIR = settings.PROMETHEUS_MULTIPROC_DIR
if MULTIPROC_DIR:
    # Metrics write their files as they are defined, just below.
    os.makedirs(MULTIPROC_DIR, exist_ok=True)

SHORT = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
LONG = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

TURNS = Counter("studio_turns", "Turns ended, by how they ended.", ["status"])
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
# livesum: the sum over the processes still running (one that exits takes
# its share with it).
SENDS_QUEUED = Gauge(
    "studio_sends_queued", "Sends waiting behind a running turn now.", multiprocess_mode="livesum"
)
COMPACTIONS = Counter(
    "studio_compactions", "Compaction attempts ended: done, retried or failed (for good).", ["status"]
)
COMPACTION_SECONDS = Histogram(
    "studio_compaction_seconds", "Seconds one compaction attempt ran.", buckets=LONG
)
WS_CONNECTIONS = Gauge(
    "studio_ws_connections", "WebSocket listeners connected now.", multiprocess_mode="livesum"
)


# --- what the domain calls ------------------------------------------------------------


def turn_ended(status: str, seconds: float) -> None:
    TURNS.labels(status).inc()
    TURN_SECONDS.observe(seconds)


def model_call_ended(provider: str, seconds: float) -> None:
    MODEL_CALL_SECONDS.labels(provider).observe(seconds)


def model_tokens_used(usage) -> None:
    """`usage`: a model call's token counts (agents.providers.base.Usage)."""
    MODEL_TOKENS.labels("input").inc(usage.input_tokens)
    MODEL_TOKENS.labels("output").inc(usage.output_tokens)
    MODEL_TOKENS.labels("cached").inc(usage.cached_input_tokens)


def credits_charged(kind: str, amount) -> None:
    CREDITS_CHARGED.labels(kind).inc(float(amount))


def send_queued() -> None:
    SENDS_QUEUED.inc()


def send_dequeued() -> None:
    SENDS_QUEUED.dec()


def compaction_ended(status: str, seconds: float) -> None:
    COMPACTIONS.labels(status).inc()
    COMPACTION_SECONDS.observe(seconds)


def ws_connected() -> None:
    WS_CONNECTIONS.inc()


def ws_disconnected() -> None:
    WS_CONNECTIONS.dec()


# --- the scrape ------------------------------------------------------------------------


def metrics_text() -> bytes:
    """Every metric in the Prometheus text format: summed over the
    processes sharing PROMETHEUS_MULTIPROC_DIR, or this process's own —
    then the workers' heartbeats, read from Redis at each scrape."""
    return _processes_text() + generate_latest(_WORKERS_REGISTRY)


def _processes_text() -> bytes:
    if not MULTIPROC_DIR:
        return generate_latest(REGISTRY)
    _forget_dead_processes(MULTIPROC_DIR)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=MULTIPROC_DIR)
    return generate_latest(registry)


class _WorkersCollector:
    """The Celery workers as their heartbeats in Redis say (studio/heartbeats.py):
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


_WORKERS_REGISTRY = CollectorRegistry(auto_describe=False)
_WORKERS_REGISTRY.register(_WorkersCollector())


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
