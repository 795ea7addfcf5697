"""Celery tasks: take an id, call the domain, nothing more."""

from celery import shared_task
from django.conf import settings

from .compaction import CompactionRetry, compaction_run


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def compaction_task(self, compaction_id: str) -> None:
    """Run a compaction; idempotent, so a redelivered task is harmless."""
    try:
        compaction_run(compaction_id)
    except CompactionRetry as error:
        if self.request.retries + 1 >= settings.STUDIO["COMPACTION_MAX_ATTEMPTS"]:
            return  # the compaction row is marked failed; nothing more to try
        raise self.retry(exc=error, countdown=min(2**self.request.retries, 30)) from error
