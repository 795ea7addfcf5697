"""A real Celery worker, in a process of its own, on this test run's
database and Redis."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from tests.conftest import wait_for

from .database import database_url_of_this_test_run

ROOT = Path(__file__).resolve().parents[2]


def celery_env(queue: str, **env) -> dict:
    """The environment of a Celery process of this test run: its database,
    Redis and channel prefix, tasks on `queue`; then `env`."""
    return {
        "STUDIO_CELERY_QUEUE": queue,
        **os.environ,
        "DATABASE_URL": database_url_of_this_test_run(),
        "REDIS_URL": settings.REDIS_URL,
        "STUDIO_CHANNEL_PREFIX": settings.CHANNEL_PREFIX,
        # A task whose worker died is handed out again after 2 s.
        "STUDIO_CELERY_VISIBILITY_TIMEOUT": "2",
        "STUDIO_CELERY_RESTORE_INTERVAL": "1",
        "STUDIO_COMPACTION_LEASE_SECONDS": "2",
        **env,
    }


class Worker:
    """A Celery worker process (solo pool) on this test run's database and
    Redis, taking tasks from `queue`; `env` overrides its environment (a
    Redis of the test's own, say)."""

    def __init__(self, log_path: Path, queue: str, *, args=(), **env):
        self.log_path = log_path
        env = celery_env(queue, **env)
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "studio", "worker", "--pool=solo", "-Q", queue]
            + [
                "-n",
                f"celery@{queue}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "info",
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            # Beside the loaded suite a worker has taken over 30 s to print a line.
            wait_for(lambda: "ready." in log_path.read_text(), timeout=180)
        except AssertionError:
            raise AssertionError("the Celery worker did not start: " + log_path.read_text()[-2000:]) from None

    def json_lines(self) -> list[dict]:
        """The lines it logged as JSON (STUDIO_LOG_FORMAT=json), parsed;
        its banner and Celery's other plain output left out."""
        lines = self.log_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


class Beat:
    """Celery beat in a process of its own, as the Procfile runs it,
    sending its tasks to `queue`; its schedule kept in `folder`."""

    def __init__(self, folder: Path, queue: str, **env):
        self.log_path = folder / "beat.log"
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "studio",
                "beat",
                "-l",
                "info",
                "-s",
                str(folder / "schedule"),
            ],
            cwd=ROOT,
            env=celery_env(queue, **env),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: "beat: Starting..." in self.log_path.read_text(), timeout=30)
        except AssertionError:
            raise AssertionError("Celery beat did not start: " + self.log_path.read_text()[-2000:]) from None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()
