"""What the benchmarks share: fresh databases, a child process running
Django on one, a studio server (Daphne, through launcher.py), the loopback
fake OpenAI server, keep-alive API clients, CPU meters, percentiles, JSON
results and a description of the machine.

Stdlib only at import (psycopg, redis and Django inside the helpers that
need them), so the client side of a benchmark stays light.
"""

import argparse
import gc
import http.client
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from launcher import Daphne

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / "bench"
PYTHON = sys.executable
POSTGRES_SERVER = "postgres://postgres@127.0.0.1:5432"
REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
# Every database (and /tmp file) a benchmark makes is named <prefix>_<name>;
# BENCH_DB_PREFIX (studio_bench…) keeps the runs of two checkouts apart.
DB_PREFIX = os.environ.get("BENCH_DB_PREFIX") or "studio_bench"
# Signs nothing that outlives a benchmark's database.
SECRET_KEY = "benchmarks-only-secret-key-8e41b7c2d9f05a36e1c4b8d27f9a03e5c6b1d4f7"


def log(name: str, text: str) -> None:
    print(f"  [{name}] {text}", file=sys.stderr, flush=True)


def main(name: str, parser: argparse.ArgumentParser, run, child=None) -> int:
    """A benchmark's command line: `run(args, log)` returns its report,
    written with the machine, the arguments (under its own `settings`) and
    the elapsed time to --json-out (by default bench/results-<name>.json),
    its `summary` lines printed; exit 1 when it says `failed`. With --child-output FILE, `child(args, log)` runs
    instead (in a child process that run_child started) and its result is
    written to FILE."""
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / f"results-{name.replace('_', '-')}.json")
    parser.add_argument("--child-output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_output:
        write_json(args.child_output, child(args, lambda text: log(name, text)))
        return 0
    started = time.monotonic()
    report = {"benchmark": name, "machine": machine_info()}
    report.update(run(args, lambda text: log(name, text)))
    arguments = {key: value for key, value in vars(args).items() if key not in ("json_out", "child_output")}
    report["settings"] = arguments | report.get("settings", {})
    report["elapsedSeconds"] = round(time.monotonic() - started, 1)
    summary = report.pop("summary", [])
    write_json(args.json_out, report)
    print("\n".join(summary))
    print(f"wrote {args.json_out} in {report['elapsedSeconds']} s")
    return 1 if report.get("failed") else 0


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


# --- databases and Django children ------------------------------------------------------


def db_name(name: str) -> str:
    """The benchmark database (and /tmp file stem) called `name`."""
    return f"{DB_PREFIX}_{name}"


def db_recreate(db: str, *, postgres: str, sqlite: Path) -> str:
    """A new, empty database: the SQLite file `sqlite` or the PostgreSQL
    database `postgres` (studio_bench_* only); returns its DATABASE_URL."""
    if db == "sqlite":
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{sqlite}{suffix}").unlink(missing_ok=True)
        return f"sqlite:///{sqlite}"
    if not postgres.startswith("studio_bench"):
        raise ValueError(f"refusing to drop {postgres!r}: benchmark databases are studio_bench*")
    import psycopg

    with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{postgres}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{postgres}"')
    return f"{POSTGRES_SERVER}/{postgres}"


def pg_query(sql: str, *args):
    """The first column of the first row, on the server's `postgres` database."""
    import psycopg

    with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return conn.execute(sql, args).fetchone()[0]


def pg_sessions(name: str) -> int:
    """Connections ever opened to database `name` (pg_stat_database.sessions)."""
    return pg_query("SELECT sessions FROM pg_stat_database WHERE datname = %s", name)


def django_env(
    database_url: str, *, drop=("STUDIO_", "DJANGO_"), redis=None, channels=None, **settings
) -> dict:
    """The environment of a process running the studio on `database_url`:
    this one's without the variables starting with one of `drop`; REDIS_URL
    `redis` (None: none, events stay in the process); with `channels`, a
    Redis channel prefix and a Celery queue of its own; DEBUG off with a
    secret key, the `scripted` model offered; then `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k != "REDIS_URL"}
    if redis:
        env["REDIS_URL"] = redis
    if channels:
        env["STUDIO_CHANNEL_PREFIX"] = env["STUDIO_CELERY_QUEUE"] = f"{channels}.{os.getpid()}"
    env.update(
        DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="studio.settings",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=SECRET_KEY,
        STUDIO_ALLOW_SCRIPTED_MODEL="1",
        PYTHONHASHSEED="0",
        **settings,
    )
    return env


def run_child(script: str, env: dict, *extra: str) -> dict | None:
    """`script` again, as a child on `env`, with this process's arguments
    and `extra`: the JSON it wrote (`--child-output`), or None (said on
    stderr) when it failed."""
    with tempfile.TemporaryDirectory(prefix="studio-bench-") as tmp:
        out = Path(tmp) / "result.json"
        command = [PYTHON, script, *sys.argv[1:], *extra, "--child-output", str(out)]
        code = subprocess.run(command, env=env).returncode
        if code != 0 or not out.exists():
            print(f"{' '.join(command[1:])}: the child process failed (exit {code})", file=sys.stderr)
            return None
        return json.loads(out.read_text())


def django_setup():
    """Django in this process (a benchmark's child), its new database
    migrated; returns the connection."""
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    return connection


def script(*steps) -> str:
    """A message the `scripted` model plays: its steps (calls, `say`)."""
    return json.dumps({"script": list(steps)})


def call(tool: str, **args) -> dict:
    return {"call": tool, "args": args}


# --- the machine and numbers -----------------------------------------------------------------


def machine_info() -> dict:
    def first(path: str, prefix: str) -> str:
        return next((line for line in Path(path).read_text().splitlines() if line.startswith(prefix)), ":0")

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()

    try:
        import redis

        redis_version = redis.Redis.from_url(REDIS_URL, socket_timeout=2).info("server")["redis_version"]
    except Exception:  # noqa: BLE001 — beside the point
        redis_version = None
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpuModel": first("/proc/cpuinfo", "model name").split(":", 1)[1].strip(),
        "cores": os.cpu_count(),
        "coresUsable": len(os.sched_getaffinity(0)),
        "memoryGiB": round(int(first("/proc/meminfo", "MemTotal:").split()[1]) / 1024**2, 1),
        "python": platform.python_version(),
        "postgres": pg_query("SHOW server_version").split(" ")[0],
        "redis": redis_version,
        "gitCommit": git("rev-parse", "--short", "HEAD") + dirty,
        "loadAverage": [round(x, 2) for x in os.getloadavg()],
    }


def percentiles(seconds: list[float]) -> dict:
    """p50/p95/p99/mean/min/max in milliseconds of durations in seconds."""
    if not seconds:
        return {"n": 0}
    ms = sorted(s * 1000 for s in seconds)
    cuts = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {
        "n": len(ms),
        "p50Ms": round(statistics.median(ms), 3),
        "p95Ms": round(cuts[94], 3),
        "p99Ms": round(cuts[98], 3),
        "meanMs": round(statistics.fmean(ms), 3),
        "minMs": round(ms[0], 3),
        "maxMs": round(ms[-1], 3),
    }


def proc_status(pid: int) -> dict:
    """VmRSS and VmHWM (peak RSS) of a process in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) process `pid` has used; without a pid,
    the busy seconds (not idle or iowait) of all cores since boot."""
    if pid is not None:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU used between start() and stop() by the server processes `pids`
    and by the whole machine (every process: the server, PostgreSQL, Redis,
    the fake model, the client, anything else running)."""

    def __init__(self, pids: list[int]):
        self.pids = pids

    def start(self) -> "CpuMeter":
        self.t0, self.machine0 = time.perf_counter(), cpu_seconds()
        self.server0 = sum(cpu_seconds(pid) for pid in self.pids)
        return self

    def stop(self, units: int) -> dict:
        wall = time.perf_counter() - self.t0
        machine = cpu_seconds() - self.machine0
        server = sum(cpu_seconds(pid) for pid in self.pids) - self.server0
        units = max(units, 1)
        return {
            "wallSeconds": round(wall, 3),
            "machineCpuSeconds": round(machine, 3),
            "machineCpuMsPerUnit": round(machine * 1000 / units, 3),
            "machineBusyShare": round(machine / (wall * os.cpu_count()), 3),
            "serverCpuSeconds": round(server, 3),
            "serverCpuMsPerUnit": round(server * 1000 / units, 3),
        }


# --- what players say ------------------------------------------------------------------------

PLAYER_LINES = (
    "I walk down to the harbour and look for Oskar's boat among the fishing skiffs.",
    "Mara pulls her hood up against the rain and keeps one hand on the knife at her belt.",
    "I ask the ferryman how long the tide will stay low tonight, and what it will cost me.",
    "Can I tell whether anyone followed us from the market? I keep glancing back at the bridge.",
    "I show Brother Aldous the wax seal from Ilsa's letter and ask if he recognises the crest.",
    "Before we go in, I light the lantern and check how much oil is left in it.",
    "I count out six silver coins for Captain Hale, but I keep the seventh hidden in my boot.",
    "Mara kneels by the chapel door and runs her fingers along the carvings, looking for a catch.",
    "I tell the guard that the Lantern Guild sent me, which is not exactly a lie.",
    "What does the old map say about the crypt under the abbey? I unroll it on the table.",
    "I listen at the cellar door for a while before I open it. Is anything moving down there?",
    "I want to buy rope, two candles and a loaf of bread before the shops close.",
)


def player_message(index: int) -> str:
    """A ~200-character player message, different every time."""
    return f"{PLAYER_LINES[index % 12]} {PLAYER_LINES[(index * 7 + 3) % 12]} ({index})"[:220]


# --- the API, over one keep-alive connection ------------------------------------------------


class ApiError(RuntimeError):
    pass


def sse_events(text: str) -> list[dict]:
    """Server-sent events as {"event", "data"} (data decoded from JSON); comments left out."""
    events = []
    for chunk in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in chunk.splitlines() if line and not line.startswith(":"))
        if "data" in fields:
            events.append({"event": fields.get("event", "message"), "data": json.loads(fields["data"])})
    return events


class Api:
    """One HTTP/1.1 keep-alive connection to the studio (one per client
    thread, TCP_NODELAY). `call` returns (status, decoded JSON body)."""

    def __init__(self, port: int, key: str, timeout: float = 120):
        self.port, self.timeout = port, timeout
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body=None) -> tuple[int, dict | None]:
        data = None if body is None else json.dumps(body).encode()
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
                self.conn.connect()
                self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self.conn.request(method, path, body=data, headers=self.headers)
                response = self.conn.getresponse()
                raw = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()  # a keep-alive connection the server had closed: once more on a new one
                if attempt == 2:
                    raise
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        if "text/event-stream" in response.getheader("Content-Type", ""):
            return response.status, sse_events(raw.decode())
        return response.status, json.loads(raw) if raw else None

    def send(self, agent: str, content: str, *, stream: bool = False) -> dict:
        """A send that must complete: returns the turn (with `stream`, read
        from the server-sent events' last, `turn.finished`)."""
        request = {"content": content} | ({"stream": True} if stream else {})
        status, body = self.call("POST", f"/api/v1/agents/{agent}/messages", request)
        if stream and status == 200:
            body = body[-1]["data"] if body and body[-1]["event"] == "turn.finished" else {"events": body}
        if status != 200 or body.get("turn", {}).get("status") != "completed":
            raise ApiError(f"send to {agent}: HTTP {status}: {str(body)[:500]}")
        return body["turn"]

    def define(self, agent: str, system_prompt: str, model: str = "scripted") -> None:
        """An agent with memory on and a maxTokens no run comes near (no
        compaction is due)."""
        compaction = {"type": "summarize", "maxTokens": 200000}
        definition = {"systemPrompt": system_prompt, "model": model, "compaction": compaction}
        definition["memory"] = {"maxOpenTokens": 4000}
        status, body = self.call("PUT", f"/api/v1/agents/{agent}", definition)
        if status not in (200, 201):
            raise ApiError(f"define {agent}: HTTP {status}: {body}")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# --- processes: the fake model and the studio -------------------------------------------------


class FakeOpenAI:
    """bench/fake_openai_server.py in its own process (its threads do not
    share a GIL with the client or the studio), answering each completion
    after `latency_ms`."""

    def __init__(self, latency_ms: int = 0):
        self.latency_ms = latency_ms

    def __enter__(self) -> "FakeOpenAI":
        script = str(BENCH_DIR / "fake_openai_server.py")
        latency = ["--latency-ms", str(self.latency_ms)] if self.latency_ms else []
        self.process = subprocess.Popen([PYTHON, script, *latency], stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.process.kill()
            raise RuntimeError(f"the fake OpenAI server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def stats(self, since: int = 0) -> dict:
        """The requests answered so far, and the records of the calls from the `since`-th on."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", f"/stats?since={since}")
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(5)


class StudioServer:
    """A fresh PostgreSQL database `db_name(name)`, migrated, with one
    game (its admin key is `key`), and Daphne serving the studio on it with
    Redis (a channel prefix and a Celery queue of its own; compactions off,
    sends unlimited); `env` adds settings."""

    def __init__(self, name: str, *, env: dict | None = None):
        self.db_name, self.extra_env = db_name(name), env or {}
        self.servers: list[Daphne] = []

    def __enter__(self) -> "StudioServer":
        started = time.monotonic()
        self.database_url = db_recreate("postgres", postgres=self.db_name, sqlite=Path())
        self.env = django_env(
            self.database_url,
            drop=("STUDIO_", "DJANGO_", "OPENAI_"),
            redis=REDIS_URL,
            channels=self.db_name,
            STUDIO_COMPACTION_RUNNER="none",
            STUDIO_SEND_RATE="100000/s",
            **self.extra_env,
        )
        for command in ("migrate --noinput -v 0", "creategame bench --credits 1000000000"):
            argv = [PYTHON, "manage.py", *command.split()]
            done = subprocess.run(argv, cwd=REPO_ROOT, env=self.env, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"manage.py {command} failed:\n{done.stderr[-3000:]}")
        self.key = done.stdout.split()[-1]  # the game's admin key, creategame's last word
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.db_name}-"))
        self.add_web_process()
        self.setup_seconds = round(time.monotonic() - started, 1)
        return self

    def add_web_process(self) -> None:
        """One more Daphne on the same database and Redis, as the Procfile runs two."""
        log = self.workdir / f"web{len(self.servers)}.log"
        self.servers.append(Daphne(self.env, log, options=("--verbosity", "0")))
        self.servers[-1].wait_ready()

    @property
    def port(self) -> int:
        return self.servers[0].port

    @property
    def pids(self) -> list[int]:
        return [server.pid for server in self.servers]

    def api(self, process: int = 0) -> Api:
        """A client of the first web process, or of the `process`-th (modulo how many run)."""
        return Api(self.servers[process % len(self.servers)].port, self.key)

    def rss(self) -> dict:
        return proc_status(self.servers[0].pid)

    def __exit__(self, exc_type, *exc) -> None:
        for server in self.servers:
            server.stop()
        if exc_type is None:
            shutil.rmtree(self.workdir)
        else:
            print(f"studio server logs: {self.workdir}", file=sys.stderr)


def best_of_three(work) -> float:
    """The least CPU (process time, ms) of three runs of `work()`, each
    after a collection."""
    times = []
    for _ in range(3):
        gc.collect()
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return min(times) * 1000


def django_in_process(root: str | Path = REPO_ROOT) -> None:
    """Django set up in this process on the code of the checkout at `root`
    (another one's, to compare two commits), for benchmarks that need no
    database: the studio's settings, an in-memory SQLite, a key for benchmarks."""
    sys.path.insert(0, str(root))
    os.chdir(root)  # Celery's loader puts the working directory first on the path
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "k7Qz9xT2vR4mW8nB3cY6pL1sD5fH0jG" * 2)
    os.environ.setdefault("DATABASE_URL", "sqlite:///:memory:")
    import django

    django.setup()
