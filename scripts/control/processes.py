"""The deployment's processes — systemd's units or the Procfile's, as
scripts/start.sh runs them — and the probes that tell whether a web process
is ready and whether the proxy sends it requests."""

import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

# --- processes ----------------------------------------------------------------------------
from .base import ROOT, UNITS, Failed, as_owner, host_header, procfile_path, run_dir, say, setting, wait_for


class Process:
    """One process of the deployment: `kind` web, worker or beat."""

    def __init__(self, name: str, kind: str, pid: int | None, port: int | None = None, starts: int = 0):
        self.name, self.kind, self.pid, self.port, self.starts = name, kind, pid, port, starts

    @property
    def running(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = Path(f"/proc/{pid}/stat")
    return not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def kind_of(command: str) -> str:
    words = command.split()
    if any(word.endswith("daphne") or word.endswith("daphne/__main__.py") for word in words):
        return "web"
    return "beat" if "beat" in words else "worker" if "worker" in words else "other"


def port_of(arguments: list[str]) -> int | None:
    for index, word in enumerate(arguments):
        if word in ("-p", "--port") and index + 1 < len(arguments) and arguments[index + 1].isdigit():
            return int(arguments[index + 1])
    return None


def proc_cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


def proc_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class ProcfileProcesses:
    """The Procfile's processes as scripts/start.sh runs them (its pid files)."""

    name = "scripts/start.sh"

    def procfile(self) -> dict[str, str]:
        entries = {}
        for line in procfile_path().read_text().splitlines():
            name, _, command = line.partition(":")
            if name.strip() and not name.strip().startswith("#") and command:
                entries[name.strip()] = command.strip()
        return entries

    def supervisor_pid(self) -> int | None:
        pid = self.pid_file("start")
        return pid if pid and pid_alive(pid) else None

    def pid_file(self, name: str) -> int | None:
        try:
            return int((run_dir() / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def processes(self) -> list[Process]:
        found = []
        for name, command in self.procfile().items():
            pid = self.pid_file(name)
            starts_file = run_dir() / f"{name}.starts"
            starts = len(starts_file.read_text().split()) if starts_file.exists() else 0
            port = port_of(proc_cmdline(pid)) if pid else None
            found.append(Process(name, kind_of(command), pid, port, starts))
        return found

    def restart(self, process: Process, timeout: float) -> Process:
        """SIGTERM: the process drains and exits, start.sh starts it again."""
        if not self.supervisor_pid():
            raise Failed("scripts/start.sh is not running: `studioctl start` first.")
        if process.running:
            os.kill(process.pid, signal.SIGTERM)
        return wait_for(
            lambda: next(
                (
                    p
                    for p in self.processes()
                    if p.name == process.name and p.running and p.pid != process.pid
                ),
                None,
            ),
            timeout,
            f"{process.name} to be started again",
        )

    def start(self) -> None:
        if self.supervisor_pid():
            return
        run_dir().mkdir(parents=True, exist_ok=True)
        log = open(run_dir() / "start.log", "a")
        subprocess.Popen(
            as_owner(["bash", str(ROOT / "scripts" / "start.sh")]),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # it outlives this command
        )
        wait_for(self.supervisor_pid, 30, "scripts/start.sh to start")
        names = set(self.procfile())
        wait_for(
            lambda: names <= {p.name for p in self.processes() if p.running}, 60, "every process to start"
        )

    def stop(self, timeout: float) -> None:
        pid = self.supervisor_pid()
        if pid:
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: not pid_alive(pid), timeout, "scripts/start.sh to stop its processes")


class SystemdProcesses:
    """The units of deploy/, installed: studio-web@PORT, studio-worker@N, studio-beat."""

    name = "systemd"
    PATTERNS = ("studio-web@*.service", "studio-worker@*.service", "studio-beat.service")

    def systemctl(self, *arguments: str) -> str:
        done = subprocess.run(["systemctl", *arguments], capture_output=True, text=True)
        if done.returncode != 0:
            raise Failed(f"systemctl {' '.join(arguments)}: {(done.stderr or done.stdout).strip()}")
        return done.stdout.strip()

    def supervisor_pid(self) -> int | None:
        return 1

    def processes(self) -> list[Process]:
        listed = self.systemctl("list-units", "--all", "--plain", "--no-legend", *self.PATTERNS)
        found = []
        for unit in sorted(line.split()[0] for line in listed.splitlines() if line.strip()):
            shown = dict(
                line.split("=", 1)
                for line in self.systemctl("show", unit, "-p", "MainPID", "-p", "NRestarts").splitlines()
            )
            pid = int(shown.get("MainPID") or 0) or None
            instance = unit.removesuffix(".service").partition("@")[2]
            kind = (
                "web"
                if unit.startswith("studio-web@")
                else "beat"
                if unit == "studio-beat.service"
                else "worker"
            )
            port = int(instance) if kind == "web" and instance.isdigit() else None
            found.append(
                Process(unit.removesuffix(".service"), kind, pid, port, 1 + int(shown.get("NRestarts") or 0))
            )
        return found

    def restart(self, process: Process, timeout: float) -> Process:
        self.systemctl("restart", process.name)
        return wait_for(
            lambda: next((p for p in self.processes() if p.name == process.name and p.running), None),
            timeout,
            f"{process.name} to be started again",
        )

    def start(self) -> None:
        self.systemctl("start", "studio.target")

    def stop(self, timeout: float) -> None:
        self.systemctl("stop", "studio.target")

    def units_install(self) -> None:
        """The release's units, as the docs' upgrade copies them."""
        for path in [*(ROOT / "deploy").glob("*.service"), *(ROOT / "deploy").glob("*.timer")]:
            shutil.copy(path, UNITS / path.name)
        shutil.copy(ROOT / "deploy" / "studio.target", UNITS / "studio.target")
        self.systemctl("daemon-reload")


def supervisor(forced: str | None = None):
    """systemd when the studio's units are installed (and systemd runs), else scripts/start.sh."""
    if forced == "systemd" or (
        forced is None and (UNITS / "studio.target").exists() and shutil.which("systemctl")
    ):
        return SystemdProcesses()
    return ProcfileProcesses()


# --- probes -------------------------------------------------------------------------------


def probe_headers() -> dict[str, str]:
    headers = {"Host": host_header()}
    if setting("STUDIO_METRICS_TOKEN"):
        headers["Authorization"] = f"Bearer {setting('STUDIO_METRICS_TOKEN')}"
    return headers


def readyz(port: int) -> tuple[int, dict]:
    """A web process's /readyz, asked directly: (status, body); (0, {}) when it does not answer."""
    return http_get(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "/readyz")


def healthz(port: int) -> dict:
    """A web process's /healthz: its version (whoever asks)."""
    return http_get(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "/healthz")[1]


def http_get(connection: http.client.HTTPConnection, path: str) -> tuple[int, dict]:
    try:
        connection.request("GET", path, headers=probe_headers())
        response = connection.getresponse()
        body = response.read()
        try:
            return response.status, json.loads(body)
        except ValueError:
            return response.status, {}
    except OSError:
        return 0, {}
    finally:
        connection.close()


def is_ready(process: Process) -> bool:
    return process.port is not None and readyz(process.port)[0] == 200


def proxy_connection() -> http.client.HTTPConnection | None:
    url = setting("STUDIO_PROXY_URL")
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(
            parts.hostname, parts.port or 443, timeout=5, context=ssl.create_default_context()
        )
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=5)


def proxy_admits(pid: int, timeout: float) -> None:
    """Wait until the proxy (STUDIO_PROXY_URL) hands a request to process
    `pid`: /readyz with the metrics token names the process that answered.
    nginx takes a process that refused a connection out of its upstream for
    `fail_timeout`; restarting the next before it is back would leave none."""
    if proxy_connection() is None or not setting("STUDIO_METRICS_TOKEN"):
        say("  (no STUDIO_PROXY_URL and STUDIO_METRICS_TOKEN: not waiting for the proxy to send it requests)")
        return
    wait_for(
        lambda: http_get(proxy_connection(), "/readyz")[1].get("pid") == pid,
        timeout,
        "the proxy to send it requests",
    )
