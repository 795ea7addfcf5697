"""Celery tasks: take an id, call the domain, nothing more."""

from celery import shared_task
from django.conf import settings

from .compaction import COMPACTION_TASK, CompactionRetry, compaction_run
from .sweep import sweep

# The periodic sweep's task, by name (the beat schedule in settings names it).
SWEEP_TASK = "agents.tasks.sweep_task"

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
)
def compaction_task(self, compaction_id: str) -> None:
    """Run a compaction; idempotent, so a redelivered task is harmless."""
    try:
        compaction_run(compaction_id)
    except CompactionRetry as error:
        if self.request.retries + 1 >= settings.STUDIO["COMPACTION_MAX_ATTEMPTS"]:
            return  # the compaction row is marked failed; nothing more to try
        raise self.retry(exc=error, countdown=min(2**self.request.retries, 30)) from error


@shared_task(name=SWEEP_TASK, ignore_result=True)
def sweep_task() -> None:
    """The periodic sweep (agents.sweep), scheduled by Celery beat."""
    sweep()
