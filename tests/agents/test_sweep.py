"""The periodic sweep (agents.sweep): what dead processes leave — turns
still live, model calls not charged, compactions a killed worker held — is
tidied within a minute, for every game, whatever its agents do next; run by
Celery beat, or by `manage.py sweep` from a timer."""

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from agents.compaction import COMPACTION_TASK
from agents.models import (
    Agent,
    Checkpoint,
    Compaction,
    CompactionStatus,
    Replay,
    ReplayStatus,
    Turn,
    TurnStatus,
)
from agents.replays import replay_cancel, replay_start
from billing import ledger
from billing.models import Account, CostLine
from studio.models import JobRun
from tests.support.compactions import wait_for_compaction
from tests.support.sending import turn_send
from tests.support.worker import Beat

from ..conftest import wait_for

LONG_AGO = timezone.now() - timedelta(hours=1)


def dead_turn(agent, **fields) -> Turn:
    """A turn its process left behind: its lease lapsed long ago; its hold
    and place counted on the account as its send counted them."""
    turn = Turn.objects.create(agent=agent, held=Decimal("0.5"), lease_until=LONG_AGO, **fields)
    Account.objects.filter(game=agent.game).update(held=Decimal("0.5"), live_turns=1)
    return turn


def test_a_sweep_ends_an_idle_agents_dead_turn_and_gives_its_hold_back(define, game, caplog):
    turn = dead_turn(define("dm"), status=TurnStatus.RUNNING)

    out = StringIO()
    call_command("sweep", stdout=out)

    turn.refresh_from_db()
    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "process_stopped")
    assert (Account.objects.get(game=game).held, Account.objects.get(game=game).live_turns) == (0, 0)
    assert all(check.is_consistent for check in ledger.ledger_check())
    assert f"turn {turn.uuid} ended failed (process_stopped)" in caplog.text
    assert "tidied" in out.getvalue()


def test_a_sweep_charges_the_open_call_a_dead_process_left(define, game):
    turn = dead_turn(define("dm"), status=TurnStatus.CANCELLED, open_call_tokens=4000)

    call_command("sweep", stdout=StringIO())

    assert CostLine.objects.get(turn_id=turn.uuid, kind="model").detail["inputTokens"] == 4000
    assert Account.objects.get(game=game).held == 0


@pytest.mark.django_db(transaction=True)
def test_a_sweep_removes_an_ended_replays_copy_once_its_last_call_is_charged(agent, send, studio_conf):
    send("hello")
    studio_conf(COMPACTION_RUNNER="none")  # the replay is queued, and left so
    replay = replay_start(agent=agent, from_block=1, through=None, changes={})
    copy = replay.replay_agent
    turn = dead_turn(copy, status=TurnStatus.CANCELLED, open_call_tokens=4000)
    replay_cancel(replay)
    assert Agent.objects.filter(pk=copy.pk).exists()  # its call is still to be charged

    call_command("sweep", stdout=StringIO())

    assert not Agent.objects.filter(pk=copy.pk).exists()
    charged = CostLine.objects.get(turn_id=turn.uuid, kind="model").amount
    replay.refresh_from_db()
    assert (replay.replay_agent, ledger.credits(replay.kept["cost"])) == (None, charged)
    assert all(check.is_consistent for check in ledger.ledger_check())


@pytest.mark.django_db(transaction=True)
def test_a_sweep_gives_up_a_replay_whose_process_died_and_removes_its_copy(define, studio_conf, caplog):
    """A replay's task is not delivered again when its worker dies: the
    sweep ends it once its lease has lapsed (before, it stayed live until
    another replay of its agent was asked for). One whose lease holds is
    left alone."""
    studio_conf(COMPACTION_RUNNER="none")  # replays queued, run by no one
    dm, npc = define("dm"), define("npc")
    for agent in (dm, npc):
        turn_send(agent=agent, content="Hello.")
    dead = replay_start(agent=dm, from_block=1, through=None, changes={})
    Replay.objects.filter(pk=dead.pk).update(
        status=ReplayStatus.RUNNING, is_playing=True, lease_until=LONG_AGO
    )
    waiting = replay_start(agent=npc, from_block=1, through=None, changes={})

    call_command("sweep", stdout=StringIO())

    dead.refresh_from_db()
    assert (dead.status, dead.error_code) == (ReplayStatus.FAILED, "process_stopped")
    assert f"replay {dead.uuid} ended failed (process_stopped)" in caplog.text
    wait_for(lambda: Replay.objects.get(pk=dead.pk).replay_agent_id is None)  # its copy went
    waiting.refresh_from_db()
    assert (waiting.status, waiting.replay_agent_id) == (ReplayStatus.QUEUED, waiting.replay_agent.pk)


def test_a_sweep_with_nothing_to_tidy_changes_nothing(agent, send):
    send("hello")
    before = list(Turn.objects.values_list("status", "error_code"))
    out = StringIO()

    call_command("sweep", stdout=out)

    assert list(Turn.objects.values_list("status", "error_code")) == before
    assert "nothing to tidy" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_a_compaction_whose_worker_was_killed_is_handed_out_again_by_the_sweep(
    start_worker, define, api, caplog
):
    agent = define("dm")
    for content in ("m1", "@compactor-sleep 5", "m3"):
        turn_send(agent=agent, content=content)
    # Redelivery by the broker takes its visibility timeout: five minutes.
    worker = start_worker(STUDIO_CELERY_VISIBILITY_TIMEOUT="300", STUDIO_COMPACTION_LEASE_SECONDS="3")
    api.post("/api/v1/agents/dm/compact")
    running = wait_for_compaction(agent, CompactionStatus.RUNNING)
    worker.kill()
    start_worker(STUDIO_CELERY_VISIBILITY_TIMEOUT="300", STUDIO_COMPACTION_LEASE_SECONDS="3")

    # Within its lease window (3 s here, a minute at most) the sweep sees it lapse.
    wait_for(
        lambda: (
            call_command("sweep", stdout=StringIO())
            or Compaction.objects.get(pk=running.pk).status != CompactionStatus.RUNNING
        ),
        timeout=15,
    )
    done = wait_for_compaction(agent, CompactionStatus.DONE, timeout=30)

    assert done.pk == running.pk and done.attempts == 2
    assert f"compaction {running.uuid}: its worker went away" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_celery_beat_runs_the_sweep(start_worker, define, tmp_path):
    turn = dead_turn(define("dm"), status=TurnStatus.RUNNING)

    start_worker("-B", "-s", str(tmp_path / "beat-schedule"), STUDIO_SWEEP_SECONDS="1")

    wait_for(lambda: Turn.objects.get(pk=turn.pk).status == TurnStatus.FAILED)
    # Each records that it ran: the dead man's switches an operator alerts on (studio/ops/jobs.py).
    wait_for(lambda: {"beat", "sweep"} <= set(JobRun.objects.values_list("job", flat=True)))


@pytest.mark.django_db(transaction=True)
def test_a_killed_workers_compaction_is_handed_out_again_once_its_lease_lapses_not_at_the_next_sweep(
    start_worker, settings, define, api, tmp_path
):
    """Beat looks for lapsed compactions every few seconds, apart from the
    sweep (an hour apart here, so it plays no part): the compaction a
    SIGKILL cut short is run again by the other worker, and done once."""
    agent = define("dm")
    for content in ("m1", "@compactor-sleep 3", "m3"):
        turn_send(agent=agent, content=content)
    # Redelivery by the broker would take five minutes: only the lapsed lease hands it out.
    env = {"STUDIO_CELERY_VISIBILITY_TIMEOUT": "300", "STUDIO_COMPACTION_LEASE_SECONDS": "3"}
    workers = [start_worker(**env), start_worker(**env)]
    beat = Beat(tmp_path, settings.CELERY_TASK_DEFAULT_QUEUE, STUDIO_SWEEP_SECONDS="3600", **env)
    try:
        api.post("/api/v1/agents/dm/compact")
        running = wait_for_compaction(agent, CompactionStatus.RUNNING)
        wait_for(lambda: any(map(took_the_compaction, workers)))
        [holder] = [worker for worker in workers if took_the_compaction(worker)]
        holder.kill()

        done = wait_for_compaction(agent, CompactionStatus.DONE, timeout=120)
    finally:
        beat.stop()

    assert done.pk == running.pk and done.attempts == 2
    assert Checkpoint.objects.filter(agent=agent).count() == 1
    assert not JobRun.objects.filter(job="sweep").exists()  # the sweep never ran


def took_the_compaction(worker) -> bool:
    """Whether `worker` received the compaction's task (Celery logs each task it receives)."""
    return f"Task {COMPACTION_TASK}[" in worker.log_path.read_text()
