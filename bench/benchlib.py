"""What the benchmarks share: fresh databases (PostgreSQL or SQLite), a
child process running Django on one, a real studio server process (Daphne),
the loopback fake OpenAI server, keep-alive API clients, percentiles, JSON
results and a description of the machine.

Used by every script in bench/; stdlib only (psycopg for dropping and
creating databases, Django only inside the helpers a Django child calls),
so the client side of a benchmark stays light.
"""

import http.client
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / "bench"
PYTHON = sys.executable
POSTGRES_SERVER = "postgres://postgres@127.0.0.1:5432"
REDIS_URL = "redis://127.0.0.1:6379/0"


# --- databases ---------------------------------------------------------------------


def pg_recreate(name: str) -> str:
    """Drop and create the database `name`; returns its DATABASE_URL."""
    if name != "studio_bench" and not name.startswith("studio_bench_"):
        raise ValueError(
            f"refusing to drop {name!r}: benchmark databases are studio_bench and studio_bench_*"
        )
    import psycopg

    with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{POSTGRES_SERVER}/{name}"


def sqlite_recreate(path: Path) -> str:
    """Delete the SQLite database `path` and its journals; returns its DATABASE_URL."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{path}"


def db_recreate(db: str, *, postgres: str, sqlite: Path) -> str:
    """A new, empty database for a child: `db` is "sqlite" (the file
    `sqlite`) or "postgres" (the database `postgres`); returns its DATABASE_URL."""
    if db == "sqlite":
        return sqlite_recreate(sqlite)
    return pg_recreate(postgres)


def pg_sessions(name: str) -> int | None:
    """Connections ever opened to database `name` (pg_stat_database.sessions,
    PostgreSQL 14+): how many connections a phase opened, by difference."""
    import psycopg

    try:
        with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()
            return int(row[0]) if row else None
    except Exception:  # noqa: BLE001 — an older server, or no such column: not essential
        return None


def pg_version() -> str | None:
    try:
        import psycopg

        with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
            return conn.execute("SHOW server_version").fetchone()[0].split()[0]
    except Exception:  # noqa: BLE001
        return None


def redis_version() -> str | None:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=2) as sock:
            sock.sendall(b"INFO server\r\n")
            data = b""
            while b"redis_version" not in data or not data.endswith(b"\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if len(data) > 200_000:
                    break
        for line in data.decode(errors="replace").splitlines():
            if line.startswith("redis_version:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


# --- a process running the studio ----------------------------------------------------


# Signs nothing that outlives a benchmark's database.
BENCH_SECRET_KEY = "benchmarks-only-secret-key-8e41b7c2d9f05a36e1c4b8d27f9a03e5c6b1d4f7"


def django_env(
    database_url: str,
    *,
    drop: tuple[str, ...] = (),
    redis: str | None = None,
    channels: str | None = None,
    **settings: str,
) -> dict:
    """The environment of a process running the studio on `database_url`:
    this process's, without the variables whose names start with one of
    `drop`; REDIS_URL `redis` (None: no REDIS_URL, events stay in the
    process); with `channels`, a Redis channel prefix and a Celery queue of
    its own named `<channels>.<this pid>`; DJANGO_SETTINGS_MODULE, DJANGO_DEBUG
    off with a secret key for benchmarks (the studio refuses to start with
    DEBUG off without a strong one), the `scripted` model offered all the
    same (the benchmarks run on it), PYTHONHASHSEED 0; then `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    if redis is None:
        env.pop("REDIS_URL", None)
    else:
        env["REDIS_URL"] = redis
    if channels is not None:
        env["STUDIO_CHANNEL_PREFIX"] = env["STUDIO_CELERY_QUEUE"] = f"{channels}.{os.getpid()}"
    env.update(
        DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="studio.settings",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=BENCH_SECRET_KEY,
        STUDIO_ALLOW_SCRIPTED_MODEL="1",
        PYTHONHASHSEED="0",
    )
    env.update(settings)
    return env


def run_child(script: str, args: list[str], env: dict, *, output_option: str, label: str, tmp_prefix: str):
    """Run `script` (a benchmark's own file, as its child) with `args` and
    `output_option FILE`, in `env`; returns the JSON the child wrote to FILE,
    or None, after saying so on stderr, when it failed."""
    with tempfile.TemporaryDirectory(prefix=tmp_prefix) as tmp:
        out = Path(tmp) / "result.json"
        command = [PYTHON, str(Path(script).resolve()), *args, output_option, str(out)]
        completed = subprocess.run(command, cwd=REPO_ROOT, env=env)
        if completed.returncode != 0 or not out.exists():
            print(f"{label}: the benchmark process failed (exit {completed.returncode})", file=sys.stderr)
            return None
        return json.loads(out.read_text())


def run_each(names, run) -> tuple[dict, list[str]]:
    """`run(name)` for each of `names` in turn (a child each): what came
    back, by name, and the names whose run failed (came back None)."""
    runs, failed = {}, []
    for name in names:
        result = run(name)
        if result is None:
            failed.append(name)
        else:
            runs[name] = result
    return runs, failed


def django_setup() -> None:
    """Django in this process (a benchmark's child), on DATABASE_URL."""
    sys.path.insert(0, str(REPO_ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()


def django_db_version(connection) -> str:
    """The server version of a Django connection's database (PostgreSQL or SQLite)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SHOW server_version")
        else:
            cursor.execute("SELECT sqlite_version()")
        return cursor.fetchone()[0].split()[0]


def script(*steps) -> str:
    """A message for the `scripted` model: its steps (tool calls, `say`)."""
    return json.dumps({"script": list(steps)})


# --- the machine -------------------------------------------------------------------


def git_commit() -> str | None:
    if not shutil.which("git"):
        return None
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{head}{' (with uncommitted changes)' if dirty else ''}"


def cpu_model() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return model or platform.processor()


def cores_usable() -> int | None:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def machine_info() -> dict:
    mem_total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_total = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpuModel": cpu_model(),
        "cores": os.cpu_count(),
        "coresUsable": cores_usable(),
        "memoryGiB": mem_total,
        "python": platform.python_version(),
        "postgres": pg_version(),
        "redis": redis_version(),
        "gitCommit": git_commit(),
        "loadAverage": [round(x, 2) for x in os.getloadavg()],
    }


def machine_info_brief() -> dict:
    """The machine as send_overhead.py and compaction.py describe it (the
    keys of their results files)."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpuModel": cpu_model(),
        "cpuCount": os.cpu_count(),
        "cpusUsable": cores_usable(),
        "python": platform.python_version(),
        "gitCommit": git_commit(),
    }


def machine_brief_line(machine: dict, versions: str) -> str:
    """One line of a `machine_info_brief()` and the databases' `versions`."""
    m = machine
    return (
        f"{m['date']} · {m['cpuModel']} · {m['cpusUsable']} CPUs · Python {m['python']} · "
        f"{versions} · commit {m['gitCommit']}"
    )


def display_path(path: Path) -> str:
    """`path` relative to the repository when it is inside it."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


# --- numbers -------------------------------------------------------------------------


def percentiles(seconds: list[float]) -> dict:
    """p50/p95/p99/mean/min/max in milliseconds of a list of durations in seconds."""
    if not seconds:
        return {"n": 0}
    ms = sorted(s * 1000 for s in seconds)
    if len(ms) >= 2:
        cuts = statistics.quantiles(ms, n=100, method="inclusive")
        p95, p99 = cuts[94], cuts[98]
    else:
        p95 = p99 = ms[0]
    return {
        "n": len(ms),
        "p50Ms": round(statistics.median(ms), 3),
        "p95Ms": round(p95, 3),
        "p99Ms": round(p99, 3),
        "meanMs": round(statistics.fmean(ms), 3),
        "minMs": round(ms[0], 3),
        "maxMs": round(ms[-1], 3),
    }


def proc_status(pid: int) -> dict:
    """VmRSS and VmHWM (peak RSS) of a process in MB, and its thread count."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
            elif key == "Threads":
                out[key] = int(value.strip())
    except OSError:
        pass
    return out


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def log(name: str, text: str) -> None:
    print(f"  [{name}] {text}", file=sys.stderr, flush=True)


# --- the API, over one keep-alive connection -----------------------------------------


class ApiError(RuntimeError):
    pass


class Api:
    """One HTTP/1.1 keep-alive connection to the studio (one per client
    thread). `call` returns (status, decoded JSON body)."""

    def __init__(self, port: int, key: str, timeout: float = 120):
        self.port, self.key, self.timeout = port, key, timeout
        self.headers = {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Connection": "keep-alive",
        }
        self.conn: http.client.HTTPConnection | None = None
        self.reconnects = 0

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            self.conn.connect()
            self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.reconnects += 1
        return self.conn

    def call(self, method: str, path: str, body=None) -> tuple[int, dict | None]:
        data = None if body is None else json.dumps(body).encode()
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers=self.headers)
                response = conn.getresponse()
                raw = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self.close()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A keep-alive connection the server had closed: once more on a new one.
                self.close()
                if attempt == 2:
                    raise
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = {"raw": raw[:500].decode(errors="replace")}
        return response.status, decoded

    def send(self, agent: str, content: str) -> dict:
        """A send that must complete: returns the turn."""
        status, body = self.call("POST", f"/api/v1/agents/{agent}/messages", {"content": content})
        if status != 200:
            raise ApiError(f"send to {agent}: HTTP {status}: {body}")
        turn = body["turn"]
        if turn["status"] != "completed":
            raise ApiError(f"send to {agent} ended {turn['status']}: {turn.get('error')}")
        return turn

    def define(self, agent: str, definition: dict) -> None:
        status, body = self.call("PUT", f"/api/v1/agents/{agent}", definition)
        if status not in (200, 201):
            raise ApiError(f"define {agent}: HTTP {status}: {body}")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# --- the fake OpenAI server ------------------------------------------------------------


class FakeOpenAI:
    """bench/fake_openai_server.py in its own process (so its threads do not
    share a GIL with the client or the studio)."""

    def __init__(self, *, latency_ms: float = 0):
        self.latency_ms = latency_ms
        self.process: subprocess.Popen | None = None
        self.port: int | None = None

    def __enter__(self) -> "FakeOpenAI":
        self.process = subprocess.Popen(
            [
                PYTHON,
                str(BENCH_DIR / "fake_openai_server.py"),
                "--port",
                "0",
                "--latency-ms",
                str(self.latency_ms),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.process.kill()
            raise RuntimeError(f"the fake OpenAI server did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", "/stats")
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def __exit__(self, *exc) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()


# --- a studio server ---------------------------------------------------------------------


def _daphne_args(port: int) -> list[str]:
    return ["-b", "127.0.0.1", "-p", str(port), "--verbosity", "0", "studio.asgi:application"]


def _interrupt(process: subprocess.Popen, wait: float) -> None:
    """SIGINT (Daphne's Twisted reactor stops and returns), then kill if it
    has not ended within `wait` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(wait)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


class StudioServer:
    """A fresh database `studio_bench_<name>`, migrated, with one game, and
    Daphne serving the studio on it with Redis (a channel prefix and a
    Celery queue of its own; compactions only queued, never run).

    `profile`: run Daphne through bench/agent_server.py's profiling
    launcher, which writes pyinstrument reports to that directory when the
    server stops."""

    def __init__(
        self,
        name: str,
        *,
        env: dict | None = None,
        credits: int = 1_000_000_000,
        profile: Path | None = None,
    ):
        self.name = name
        self.db_name = f"studio_bench_{name}"
        self.extra_env = env or {}
        self.credits = credits
        self.profile = profile
        self.workdir = Path(tempfile.mkdtemp(prefix=f"studio-bench-{name}-"))
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self.key: str | None = None
        self.database_url: str | None = None
        # More web processes on the same database and Redis (add_web_process).
        self.peers: list[tuple[subprocess.Popen, int]] = []

    def environment(self) -> dict:
        env = django_env(
            self.database_url,
            drop=("STUDIO_", "DJANGO_", "OPENAI_"),
            redis=REDIS_URL,
            channels=self.db_name,
            STUDIO_COMPACTION_RUNNER="none",
            STUDIO_SEND_RATE="100000/s",
        )
        env.update(self.extra_env)
        return env

    def __enter__(self) -> "StudioServer":
        started = time.monotonic()
        self.database_url = pg_recreate(self.db_name)
        env = self.environment()
        manage = [PYTHON, "manage.py"]
        subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=REPO_ROOT, env=env, check=True)
        out = subprocess.run(
            [*manage, "creategame", "bench", "--credits", str(self.credits)],
            cwd=REPO_ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        self.key = out.strip().splitlines()[-1].strip()
        self.port = free_port()
        self.log_path = self.workdir / "server.log"
        self._log = open(self.log_path, "w")
        daphne_args = _daphne_args(self.port)
        if self.profile is not None:
            command = [
                PYTHON,
                str(BENCH_DIR / "agent_server.py"),
                "--serve-profiled",
                str(self.profile),
                "--",
            ]
        else:
            command = [PYTHON, "-m", "daphne"]
        self.process = subprocess.Popen(
            [*command, *daphne_args], cwd=REPO_ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self._wait_up()
        self.setup_seconds = round(time.monotonic() - started, 1)
        return self

    def add_web_process(self) -> int:
        """One more Daphne process on the same database and Redis, as the
        Procfile runs two; returns its port."""
        port = free_port()
        process = subprocess.Popen(
            [PYTHON, "-m", "daphne", *_daphne_args(port)],
            cwd=REPO_ROOT,
            env=self.environment(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.peers.append((process, port))
        self._wait_up(process=process, port=port)
        return port

    @property
    def ports(self) -> list[int]:
        return [self.port, *(port for _, port in self.peers)]

    @property
    def pids(self) -> list[int]:
        return [self.pid, *(process.pid for process, _ in self.peers)]

    def _wait_up(self, timeout: float = 60, process=None, port=None) -> None:
        process, port = process or self.process, port or self.port
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the studio server exited ({process.returncode}):\n{self.log_tail()}")
            try:
                api = Api(port, self.key, timeout=5)
                status, _ = api.call("GET", "/api/v1/agents")
                api.close()
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the studio server did not answer within {timeout} s:\n{self.log_tail()}")

    def api(self, timeout: float = 120, process: int = 0) -> Api:
        """A client of the first web process, or of the `process`-th (modulo
        how many run)."""
        ports = self.ports
        return Api(ports[process % len(ports)], self.key, timeout=timeout)

    @property
    def pid(self) -> int:
        return self.process.pid

    def status(self) -> dict:
        return proc_status(self.pid)

    def cpu_seconds(self) -> float | None:
        return proc_cpu_seconds(self.pid)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-chars:]
        except (OSError, AttributeError):
            return ""

    def stop(self) -> None:
        for process, _ in self.peers:
            _interrupt(process, 10)
        if self.process:
            # The profiling launcher writes its reports once Daphne returns.
            _interrupt(self.process, 60 if self.profile else 10)
        if getattr(self, "_log", None):
            self._log.close()

    def __exit__(self, exc_type, *exc) -> None:
        self.stop()
        if exc_type is None:  # the log is kept (and its path shown) only when something failed
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            print(
                f"studio server log: {self.log_path if hasattr(self, 'log_path') else self.workdir}",
                file=sys.stderr,
            )


def add_db_pool_option(parser) -> None:
    """--db-pool of the server benchmarks."""
    parser.add_argument(
        "--db-pool",
        action="store_true",
        help="serve with STUDIO_DB_POOL=1 (a PostgreSQL connection pool per process; README: recommended "
        "for production web processes)",
    )


def agent_definition(system_prompt: str, model: str = "scripted") -> dict:
    """An agent of the server benchmarks, as PUT to the API: memory on, and a
    maxTokens large enough that no compaction is due within a run (none runs
    there anyway)."""
    return {
        "systemPrompt": system_prompt,
        "model": model,
        "memory": {"maxOpenTokens": 4000},
        "compaction": {"type": "summarize", "maxTokens": 200000},
    }


def write_json(path: Path | None, data: dict) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


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
    a = PLAYER_LINES[index % len(PLAYER_LINES)]
    b = PLAYER_LINES[(index * 7 + 3) % len(PLAYER_LINES)]
    return f"{a} {b} ({index})"[:220]


def machine_cpu_seconds() -> float:
    """CPU seconds all cores have spent busy (not idle or iowait) since boot."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds used, between start() and stop(), by the server process
    (or processes: `pid` may be a list) and by the whole machine (every
    process: the server, PostgreSQL, Redis, the fake model, this client,
    anything else running)."""

    def __init__(self, pid: int | list[int] | None):
        self.pids = [pid] if isinstance(pid, int) else list(pid or [])

    def _server_seconds(self) -> float | None:
        seconds = [proc_cpu_seconds(pid) for pid in self.pids]
        return None if not seconds or None in seconds else sum(seconds)

    def start(self) -> "CpuMeter":
        self.t0 = time.perf_counter()
        self.machine0 = machine_cpu_seconds()
        self.server0 = self._server_seconds()
        return self

    def stop(self, units: int) -> dict:
        wall = time.perf_counter() - self.t0
        machine = machine_cpu_seconds() - self.machine0
        out = {
            "wallSeconds": round(wall, 3),
            "machineCpuSeconds": round(machine, 3),
            "machineCpuMsPerUnit": round(machine * 1000 / units, 3) if units else None,
            "machineBusyShare": round(machine / (wall * (os.cpu_count() or 1)), 3) if wall else None,
        }
        if self.server0 is not None:
            server = self._server_seconds() - self.server0
            out["serverCpuSeconds"] = round(server, 3)
            out["serverCpuMsPerUnit"] = round(server * 1000 / units, 3) if units else None
        return out
