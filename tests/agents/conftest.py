"""Fixtures of the agents tests: counting the work difflib does, for tests
that bound it (each search for a longest match compares every line, or
word, of its stretch of one text with each place the other text holds it),
and real Celery workers."""

import difflib
import uuid
from itertools import islice

import pytest

from tests.support.worker import Worker


class Comparisons:
    def __init__(self):
        self.count = 0


@pytest.fixture
def comparisons(monkeypatch) -> Comparisons:
    """How many comparisons difflib made, from here on (in this thread)."""
    counted = Comparisons()
    search = difflib.SequenceMatcher.find_longest_match

    def counting(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi = len(self.a) if ahi is None else ahi
        counted.count += ahi - alo
        counted.count += sum(len(self.b2j.get(item, ())) for item in islice(self.a, alo, ahi))
        return search(self, alo, ahi, blo, bhi)

    monkeypatch.setattr(difflib.SequenceMatcher, "find_longest_match", counting)
    return counted


@pytest.fixture
def start_worker(tmp_path, studio_conf, settings):
    """Start a real Celery worker (tests/support/worker.py's `Worker`)
    on a queue of this test's own, with extra arguments and environment;
    stopped after the test."""
    studio_conf(COMPACTION_RUNNER="celery")
    # A queue of this test's own: nothing else on this Redis can take its
    # tasks, and nothing left from elsewhere reaches its workers.
    settings.CELERY_TASK_DEFAULT_QUEUE = f"test-{uuid.uuid4().hex[:12]}"
    workers = []

    def _start(*args, **env):
        log = tmp_path / f"worker{len(workers)}.log"
        workers.append(Worker(log, settings.CELERY_TASK_DEFAULT_QUEUE, args=args, **env))
        return workers[-1]

    yield _start
    for worker in workers:
        worker.stop()
