"""The studio served by Daphne in a process of its own on a free port of
127.0.0.1: started, waited for until /readyz answers, stopped. The
benchmarks' servers and tests/scale's web processes are these; stdlib only.
"""

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Daphne:
    """`python -m daphne [options] … studio.asgi:application` in `env`, its
    output in the file `log`."""

    def __init__(self, env: dict, log: Path, *, options=(), port: int | None = None):
        # A short drain on SIGTERM unless the caller asks otherwise: tests and
        # benchmarks stop servers that may still hold a stream open.
        self.env = env = {"STUDIO_SHUTDOWN_GRACE_SECONDS": "2", **env}
        # `port`: a process restarted where another was (a rolling restart).
        self.port, self.log = port or free_port(), Path(log)
        self.url = f"http://127.0.0.1:{self.port}"
        bind = ["-b", "127.0.0.1", "-p", str(self.port), "studio.asgi:application"]
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daphne", *options, *bind],
                cwd=Path(__file__).resolve().parent.parent,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.process.pid

    def wait_ready(self, timeout: float = 180) -> "Daphne":
        """Until /readyz answers 200: only a hang takes `timeout`, however
        loaded the machine (beside the loaded test suite a process has taken
        over 30 s to import what it serves)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=5):
                    return self
            except OSError:  # not listening yet, or 503 while it is not ready
                time.sleep(0.1)
        self.stop()
        tail = self.log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the studio server was not ready (exit {self.process.returncode}):\n{tail}")

    def stop(self, wait: float = 10) -> None:
        """SIGTERM (Daphne's reactor stops and returns), SIGKILL after `wait`
        seconds. Not SIGINT: a process started from a background job of a
        shell script inherits SIGINT ignored, and Twisted then leaves it so."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(wait)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def serve(count: int, env: dict, logs: Path, **options) -> list[Daphne]:
    """`count` servers started at once, each ready, logging to `logs`/web<i>.log."""
    servers = [Daphne(env, Path(logs) / f"web{index}.log", **options) for index in range(count)]
    try:
        return [server.wait_ready() for server in servers]
    except BaseException:
        for server in servers:
            server.stop()
        raise
