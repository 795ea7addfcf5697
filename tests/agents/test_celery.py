"""Compactions on a real Celery worker (a subprocess) over this machine's
Redis — the happy path, a worker killed in the middle of one, one that
fails for good, and the worker's log lines naming the request that queued
the compaction."""

import logging
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from agents.models import Block, Checkpoint, Compaction, CompactionStatus
from agents.sweep import sweep
from billing.models import CostLine
from tests.support.compactions import wait_for_compaction
from tests.support.logs import json_lines_logged
from tests.support.sending import turn_send
from tests.support.worker import Worker

from ..conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) for the Celery broker"),
]


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
    from studio.ops import health

    settings.STUDIO_METRICS_TOKEN = "a-token-for-the-scraper"
    auth = {"authorization": "Bearer a-token-for-the-scraper"}
    name = f"celery@{settings.CELERY_TASK_DEFAULT_QUEUE}"

    def workers_seen():
        health.readiness_forget()
        return [worker["name"] for worker in client.get("/readyz", headers=auth).json()["workers"]]

    worker = start_worker()
    wait_for(lambda: name in workers_seen())
    metrics = client.get("/metrics", headers=auth).content.decode()
    worker.stop()

    assert f'studio_worker_heartbeat_age_seconds{{worker="{name}"}}' in metrics
    assert "\nstudio_workers_live " in metrics
    assert name not in workers_seen()  # a worker that stops says so at once


def compaction_lines(worker: Worker, compaction: Compaction) -> list[dict]:
    return [line for line in worker.json_lines() if line.get("compaction") == str(compaction.uuid)]


def task_lines(worker: Worker) -> list[dict]:
    """Celery's lines for how each run of a task ended."""
    return [line for line in worker.json_lines() if line["logger"] == "celery.app.trace"]


def received_lines(worker: Worker) -> list[dict]:
    """Celery's lines for each task message the worker took in."""
    return [line for line in worker.json_lines() if line["logger"] == "celery.worker.strategy"]


def test_the_workers_log_line_for_a_compaction_names_the_request_that_queued_it(start_worker, define, api):
    agent = define("dm")
    for n in range(3):
        turn_send(agent=agent, content=f"message {n}")
    worker = start_worker(STUDIO_LOG_FORMAT="json")

    api.post("/api/v1/agents/dm/compact", HTTP_X_REQUEST_ID="req-to-worker-1")

    done = wait_for_compaction(agent, CompactionStatus.DONE)
    wait_for(lambda: compaction_lines(worker, done))
    [line] = compaction_lines(worker, done)
    assert (line["logger"], line["level"]) == ("agents.compaction", "INFO")
    assert line["message"].startswith(
        f"compaction {done.uuid} done (manual, attempt 1): folded through block 2"
    )
    assert (line["request_id"], line["game"], line["agent"]) == ("req-to-worker-1", "ashmere", "dm")
    # Celery's own line for the task carries the request's id too.
    wait_for(lambda: task_lines(worker))
    [ended] = task_lines(worker)
    assert "succeeded" in ended["message"] and ended["request_id"] == "req-to-worker-1"
    # And its line for the message's arrival, written before the task runs.
    [received] = received_lines(worker)
    assert "received" in received["message"] and received["request_id"] == "req-to-worker-1"


def test_a_compaction_the_sweep_hands_out_again_is_logged_under_the_request_that_queued_it(
    start_worker, define, api, studio_conf
):
    agent = define("dm")
    for n in range(3):
        turn_send(agent=agent, content=f"message {n}")
    worker = start_worker(STUDIO_LOG_FORMAT="json")
    # Queued, its task never sent (lost): its lease lapses, and the sweep
    # — no request of its own — hands it out again.
    studio_conf(COMPACTION_RUNNER="none", COMPACTION_LEASE_SECONDS=1)
    api.post("/api/v1/agents/dm/compact", HTTP_X_REQUEST_ID="req-swept-1")
    queued = Compaction.objects.get(agent=agent)
    wait_for(lambda: Compaction.objects.get(pk=queued.pk).lease_until < timezone.now())
    studio_conf(COMPACTION_RUNNER="celery")

    logged = json_lines_logged(logging.INFO)
    swept_lines = next(logged)
    assert sweep()
    swept = [line for line in swept_lines() if line["logger"] == "agents.compaction"]
    next(logged, None)
    done = wait_for_compaction(agent, CompactionStatus.DONE)
    wait_for(lambda: task_lines(worker))

    assert done.pk == queued.pk
    assert [line["request_id"] for line in swept] == ["req-swept-1"]
    lines = compaction_lines(worker, done) + received_lines(worker) + task_lines(worker)
    assert len(lines) >= 3
    assert {line["request_id"] for line in lines} == {"req-swept-1"}


def test_a_compaction_that_fails_for_good_ends_its_task_failed_and_is_logged_at_warning(
    start_worker, define, api
):
    agent = define("dm")
    turn_send(agent=agent, content="@compactor-fail the compactor is down")
    turn_send(agent=agent, content="m2")
    worker = start_worker(STUDIO_LOG_FORMAT="json", STUDIO_COMPACTION_MAX_ATTEMPTS="2")

    api.post("/api/v1/agents/dm/compact", HTTP_X_REQUEST_ID="req-to-worker-2")

    failed = wait_for_compaction(agent, CompactionStatus.FAILED)
    wait_for(lambda: len(task_lines(worker)) == 2)
    lines = compaction_lines(worker, failed)
    assert [line["level"] for line in lines] == ["WARNING", "WARNING", "WARNING"]
    assert lines[-1]["message"] == (
        f"compaction {failed.uuid} failed for good after 2 attempts: {failed.error}"
    )
    assert all(line["request_id"] == "req-to-worker-2" for line in lines)
    # Celery's lines for the task: one retry, then its end — failed, not "succeeded".
    retried, ended = task_lines(worker)
    assert " retry: " in retried["message"]
    assert "succeeded" not in ended["message"]
    assert "raised expected: CompactionFailed" in ended["message"] and str(failed.uuid) in ended["message"]
