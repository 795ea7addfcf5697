"""The threads model calls run in: kept between calls, one per call at
once, and gone once left free long enough."""

import threading

from agents.providers.base import CallThreads

from ..conftest import wait_for


def _run(threads: CallThreads, job=lambda: None) -> threading.Thread:
    """Runs `job` in `threads`; returns the thread it ran in, once it has."""
    ran = []
    threads.run(lambda: (ran.append(threading.current_thread()), job()))
    assert threads.wait_quiet(10)
    return ran[0]


def test_a_call_runs_in_the_thread_the_last_one_ended_in():
    threads = CallThreads(keep_seconds=60)

    first, second = _run(threads), _run(threads)

    assert first is second
    assert first.name == "model-call" and first.is_alive()


def test_calls_at_once_each_get_a_thread_of_their_own():
    threads = CallThreads(keep_seconds=60)
    release, running, seen = threading.Event(), threading.Semaphore(0), []

    def call():
        seen.append(threading.current_thread())
        running.release()
        release.wait(10)

    for _ in range(3):
        threads.run(call)
    for _ in range(3):
        assert running.acquire(timeout=10)  # none waits for another to end
    release.set()

    assert threads.wait_quiet(10)
    assert len(set(seen)) == 3


def test_a_thread_left_free_ends_and_the_next_call_gets_a_new_one():
    threads = CallThreads(keep_seconds=0.05)

    first = _run(threads)
    wait_for(lambda: not first.is_alive())
    second = _run(threads)

    assert second is not first


def test_a_call_that_raises_leaves_its_thread_for_the_next():
    threads = CallThreads(keep_seconds=60)

    def broken():
        raise RuntimeError("the call broke")

    failed = _run(threads, broken)

    assert _run(threads) is failed


def test_waiting_for_the_calls_started_since_a_count_skips_older_ones():
    threads = CallThreads(keep_seconds=60)
    release = threading.Event()
    threads.run(lambda: release.wait(10))
    since = threads.started

    threads.run(lambda: None)

    assert threads.wait_quiet(10, since=since)  # while the older call still runs
    assert not threads.wait_quiet(0.01)
    release.set()
    assert threads.wait_quiet(10)
