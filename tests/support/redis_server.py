"""A Redis server of a test's own, so restarting or killing it disturbs
nothing else."""

import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path

from bench.launcher import free_port
from tests.conftest import wait_for


class Redis:
    """A Redis server of the test's own, so restarting it disturbs nothing else."""

    def __init__(self, port: int, workdir: Path):
        self.port, self.workdir = port, workdir
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: _port_open(self.port))

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@contextmanager
def redis_running(workdir: Path):
    """A Redis of the test's own on a free port, killed at the end."""
    server = Redis(free_port(), workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False
