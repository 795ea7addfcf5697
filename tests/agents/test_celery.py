"""Compactions on a real Celery worker (a subprocess) over this machine's
Redis — the happy path, and a worker killed in the middle of one."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from agents.engine import turn_send
from agents.models import Block, Checkpoint, Compaction, CompactionStatus
from billing.models import CostLine

from ..conftest import wait_for
from .test_multiprocess import database_url_of_this_test_run

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) for the Celery broker"),
]


class Worker:
    """A Celery worker process (solo pool) on this test run's database and
    Redis, taking tasks from `queue`; `env` overrides its environment (a
    Redis of the test's own, say)."""

    def __init__(self, log_path: Path, queue: str, *, args=(), **env):
        env = {
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
            wait_for(lambda: "ready." in log_path.read_text(), timeout=30)
        except AssertionError:
            raise AssertionError("the Celery worker did not start: " + log_path.read_text()[-2000:]) from None

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


def wait_for_compaction(agent, status, timeout=30):
    """Wait until the agent's newest compaction has `status`; return it."""
    wait_for(lambda: Compaction.objects.filter(agent=agent).latest("id").status == status, timeout=timeout)
    return Compaction.objects.filter(agent=agent).latest("id")


def test_a_worker_runs_the_compaction_the_api_asks_for(start_worker, define, api):
    agent = define("dm")
    for n in range(3):
        turn_send(agent=agent, content=f"message {n}")
    start_worker()

    response = api.post("/api/v1/agents/dm/compact")

    assert response.status_code == 202
    done = wait_for_compaction(agent, CompactionStatus.DONE)
    checkpoint = Checkpoint.objects.get(agent=agent)
    assert done.checkpoint_id == checkpoint.pk
    assert checkpoint.through_block == 2
    assert "- user: message 0" in checkpoint.summary
    assert list(Block.objects.filter(agent=agent, folded=True).values_list("number", flat=True)) == [1, 2]


def test_a_worker_killed_mid_compaction_loses_nothing_and_the_compaction_is_retried(
    start_worker, define, api
):
    agent = define("dm")
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    api.post("/api/v1/agents/dm/compact")
    first_worker = start_worker()
    first = wait_for_compaction(agent, CompactionStatus.DONE)
    turn_send(agent=agent, content="@compactor-sleep 3")
    turn_send(agent=agent, content="m4")

    api.post("/api/v1/agents/dm/compact")
    wait_for_compaction(agent, CompactionStatus.RUNNING)
    first_worker.kill()

    # The previous checkpoint is still in force, nothing was folded or charged.
    assert Checkpoint.objects.filter(agent=agent).latest().pk == first.checkpoint_id
    assert not Block.objects.get(agent=agent, number=3).folded
    assert CostLine.objects.filter(kind="compaction").count() == 1
    # Turns keep working while no worker is up.
    assert turn_send(agent=agent, content="m5").status == "completed"

    start_worker()
    retried = wait_for_compaction(agent, CompactionStatus.DONE, timeout=60)

    assert retried.attempts >= 2
    latest = Checkpoint.objects.filter(agent=agent).latest()
    assert latest.through_block == 4
    assert Checkpoint.objects.filter(agent=agent).count() == 2
    assert CostLine.objects.filter(kind="compaction").count() == 2
    assert list(Block.objects.filter(agent=agent).values_list("number", flat=True)) == [1, 2, 3, 4, 5]


def test_a_running_worker_is_seen_in_readiness_and_metrics_and_a_stopped_one_is_gone(
    start_worker, client, settings
):
    from studio import health

    settings.STUDIO_METRICS_TOKEN = "a-token-for-the-scraper"
    auth = {"authorization": "Bearer a-token-for-the-scraper"}
    name = f"celery@{settings.CELERY_TASK_DEFAULT_QUEUE}"

    def workers_seen():
        health.readiness_forget()
        return [worker["name"] for worker in client.get("/readyz", headers=auth).json()["workers"]]

    worker = start_worker()
    wait_for(lambda: name in workers_seen(), timeout=15)
    metrics = client.get("/metrics", headers=auth).content.decode()
    worker.stop()

    assert f'studio_worker_heartbeat_age_seconds{{worker="{name}"}}' in metrics
    assert "\nstudio_workers_live " in metrics
    assert name not in workers_seen()  # a worker that stops says so at once
