"""A lease kept while work runs: work that records `lease_until` on its row
(a compaction, a replay) renews it from a thread of its own, so a row whose
process died is seen to be abandoned once its lease lapses."""

import logging
import threading
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

log = logging.getLogger(__name__)


def lease_until(seconds: float):
    return timezone.now() + timedelta(seconds=seconds)


@contextmanager
def lease_kept(running: QuerySet, seconds: float, what: str):
    """While the block runs, renew `lease_until` on the rows of `running`
    (the work's row while it is still running) every third of `seconds`.
    A renewal that fails is tried again at the next third, so a moment's
    blip of the database does not hand the work to another process; one
    away for longer than the lease lets it lapse."""
    done = threading.Event()

    def renew() -> None:
        try:
            while not done.wait(seconds / 3):
                try:
                    running.update(lease_until=lease_until(seconds))
                except Exception:
                    log.warning("%s: its lease could not be renewed", what, exc_info=True)
                    connection.close()  # a broken connection is not used again
        finally:
            connection.close()

    threading.Thread(target=renew, name=f"lease-{what}", daemon=True).start()
    try:
        yield
    finally:
        done.set()
