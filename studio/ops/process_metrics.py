"""Each studio process's own resources, as metrics: resident memory,
threads, open files, CPU seconds, and how often it has started.

prometheus-client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR, how the
Procfile and the units run the studio) serves no process collector: the
process scraped is not the process measured. So every long-running process
— a Daphne web process, a Celery worker and its pool's children, beat —
samples itself from /proc every SAMPLE_SECONDS, on a thread of its own,
into gauges and counters labelled with its name (`web:8001`, `worker1`,
`beat`): a few names a deployment, never a pid, so a restart adds no
series. A worker's children count under their worker's name (the gauges
are summed over the live processes of a name). `…_starts_total` counts
each start of a web process, worker or beat since the studio as a whole
started (its metrics directory emptied): more than one is a restart.
"""

import logging
import os
import sys
import threading
import time
from pathlib import Path

from prometheus_client import Counter, Gauge

log = logging.getLogger(__name__)

SAMPLE_SECONDS = 5.0

RSS = Gauge(
    "studio_process_resident_memory_bytes",
    "Resident memory of the studio's processes, by process name (a worker with its pool's children).",
    ["process"],
    multiprocess_mode="livesum",
)
THREADS = Gauge(
    "studio_process_threads",
    "Threads of the studio's processes, by process name.",
    ["process"],
    multiprocess_mode="livesum",
)
OPEN_FDS = Gauge(
    "studio_process_open_fds",
    "Open file descriptors (sockets included) of the studio's processes, by process name.",
    ["process"],
    multiprocess_mode="livesum",
)
CPU = Counter(
    "studio_process_cpu_seconds",
    "CPU seconds (user and system) the studio's processes used, by process name.",
    ["process"],
)
STARTS = Counter(
    "studio_process_starts",
    "Starts of each studio process since the studio as a whole started (more than one: it restarted).",
    ["process"],
)

_started = False
_lock = threading.Lock()


def process_name(argv: list[str] | None = None) -> str:
    """This process's name in the metrics: STUDIO_PROCESS_NAME, else read
    from how it was started — `web:<port>` for Daphne, the node name's
    first part for a Celery worker (`-n worker1@%h`: `worker1`), `beat`."""
    named = os.environ.get("STUDIO_PROCESS_NAME", "").strip()
    if named:
        return named
    argv = sys.argv if argv is None else argv
    program = os.path.basename(argv[0]) if argv else ""
    # `daphne …`, or `python -m daphne …` (argv[0]: …/daphne/__main__.py).
    if program == "daphne" or (argv and "daphne" in Path(argv[0]).parts):
        port = _option(argv, "-p", "--port")
        return f"web:{port}" if port else "web"
    if "worker" in argv:
        node = _option(argv, "-n", "--hostname")
        return node.partition("@")[0] if node else "worker"
    if "beat" in argv:
        return "beat"
    return program.removesuffix(".py") or "python"


def _option(argv: list[str], short: str, long: str) -> str | None:
    for index, word in enumerate(argv):
        if word in (short, long) and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith(f"{long}="):
            return word.partition("=")[2]
    return None


def process_metrics_start(*, count_start: bool = True) -> None:
    """Sample this process from now on (once per process: a second call
    does nothing). `count_start`: a start of the process itself, not a
    pool child of a worker."""
    global _started
    with _lock:
        if _started or not os.path.exists("/proc/self/stat"):
            return
        _started = True
    name = process_name()
    if count_start:
        STARTS.labels(name).inc()
    sampler = _Sampler(name)
    sampler.sample()
    threading.Thread(target=sampler.run, name="process-metrics", daemon=True).start()


def process_metrics_forget_fork() -> None:
    """In a child just forked from a sampled process: its sampler thread
    did not come along; start its own."""
    global _started
    _started = False


class _Sampler:
    def __init__(self, name: str):
        self.name = name
        # A forked child's CPU times start at zero: all of them are its own.
        self.cpu_seen = 0.0

    def run(self) -> None:
        while True:
            time.sleep(SAMPLE_SECONDS)
            try:
                self.sample()
            except Exception:  # never let a metric take a process down
                log.debug("process metrics: could not sample", exc_info=True)

    def sample(self) -> None:
        status = _status()
        RSS.labels(self.name).set(status.get("VmRSS", 0) * 1024)
        THREADS.labels(self.name).set(status.get("Threads", 0))
        OPEN_FDS.labels(self.name).set(len(os.listdir("/proc/self/fd")))
        cpu = _cpu_seconds()
        CPU.labels(self.name).inc(max(cpu - self.cpu_seen, 0.0))
        self.cpu_seen = cpu


def _status() -> dict[str, int]:
    """The numbers of /proc/self/status this samples (kB for memory)."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                found[key] = int(value.split()[0])
    return found


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system
