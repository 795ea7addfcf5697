"""Celery tasks: take an id, call the domain, nothing more."""

from celery import shared_task
from django.conf import settings

from agents.compaction import (
    COMPACTION_TASK,
    CompactionFailed,
    CompactionRetry,
    compaction_run,
    compactions_reap,
)
from agents.replays import REPLAY_TASK, replay_run
from agents.sweep import sweep

# The periodic sweep's task, and the lapsed compactions' one, by name (the
# beat schedule in settings names them).
SWEEP_TASK = "agents.tasks.sweep_task"
COMPACTIONS_LAPSED_TASK = "agents.tasks.compactions_lapsed_task"

# Past the compaction's lease (by then another worker may hold it): a soft
# limit the run sees as an exception (the attempt fails and is retried),
# then a hard one that ends the worker process.
_LEASE = settings.STUDIO["COMPACTION_LEASE_SECONDS"]


@shared_task(
    name=COMPACTION_TASK,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
    soft_time_limit=_LEASE + 30,
    time_limit=_LEASE + 60,
    # Expected: the task ends failed, logged by Celery in one line without
    # a traceback (the studio has logged the compaction's error), and is
    # not retried.
    throws=(CompactionFailed,),
)
def compaction_task(self, compaction_id: str) -> None:
    """Run a compaction; idempotent, so a redelivered task is harmless. The
    compaction's row decides when it has failed for good, not the task's
    count of retries (a worker that died mid-attempt used one too)."""
    try:
        compaction_run(compaction_id)
    except CompactionFailed:
        raise
    except CompactionRetry as error:
        raise self.retry(exc=error, countdown=min(2**self.request.retries, 30)) from error


@shared_task(name=REPLAY_TASK, ignore_result=True)
def replay_task(replay_id: str) -> None:
    """Play a replay's next block, and queue the rest as the next task: a
    worker takes other tasks between a replay's blocks. A block is one
    send, bounded by the turn deadline. Delivered twice, the second finds
    it being played and does nothing."""
    replay_run(replay_id, one_block=True)


@shared_task(name=SWEEP_TASK, ignore_result=True)
def sweep_task() -> None:
    """The periodic sweep (agents.sweep), scheduled by Celery beat."""
    sweep()


@shared_task(name=COMPACTIONS_LAPSED_TASK, ignore_result=True)
def compactions_lapsed_task() -> None:
    """Hand out again the compactions whose worker died, as soon as their
    lease lapses: scheduled by beat every few seconds, apart from the
    sweep, since it is one look at the few live compactions (an index holds
    only those) where the sweep reads much more."""
    compactions_reap()
