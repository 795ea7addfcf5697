"""Dead man's switches: each periodic job records when it last ran, so an
operator is told when one stops — not only when one fails.

- `beat`: Celery beat sent the sweep (recorded in the beat process, as it
  sends it: a beat that died stops it even while workers run);
- `sweep`: a sweep ran to its end (on a worker, or `manage.py sweep`);
- `prune`: `manage.py prune` deleted what is past keeping (not a dry run);
- `backup` / `backup_checked`: `scripts/studioctl backup` took a dump, and
  restored one into a scratch database that passed `checkledger`.

One row a job in PostgreSQL (`studio.JobRun`), not in Redis, which keeps
nothing across a restart: a backup's record must outlive one. /metrics
shows each as `studio_last_run_timestamp_seconds{job}` (studio/ops/metrics.py)
and `scripts/studioctl status` as an age.
"""

import logging
from datetime import datetime

from django.db import DatabaseError, connection
from django.utils import timezone

from studio.models import JobRun

log = logging.getLogger(__name__)

JOBS = ("beat", "sweep", "prune", "backup", "backup_checked")


def job_ran(job: str, *, at: datetime | None = None) -> None:
    """Record that `job` ran now (or `at`). A database that is away loses
    the record, never the job: it is logged, and the next run records."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}: one of {', '.join(JOBS)}")
    try:
        # One statement, whoever else records the same job at once.
        JobRun.objects.bulk_create(
            [JobRun(job=job, last_at=at or timezone.now())],
            update_conflicts=True,
            unique_fields=["job"],
            update_fields=["last_at"],
        )
    except DatabaseError:
        log.warning("could not record that %s ran: the database is unavailable", job, exc_info=True)
        if not connection.in_atomic_block:
            connection.close()


def jobs_last_run() -> dict[str, datetime]:
    """Each job that has ever run, and when it last did."""
    return dict(JobRun.objects.values_list("job", "last_at"))
