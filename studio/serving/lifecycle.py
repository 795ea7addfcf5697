"""Where this process is in its life: serving, draining, or past its grace.

A web process asked to stop (SIGTERM) drains: it stops listening, answers
requests that still arrive on open connections with 503 (`/readyz` too, so
a load balancer sends them elsewhere), and lets the work it has — requests
in flight, turns running in the background — finish, for up to
STUDIO_SHUTDOWN_GRACE_SECONDS. Past that grace the work still running is
told to stop (`is_past_grace`): turns end `failed` with code `shutdown`,
giving their holds back, and queued sends are refused so their clients send
again elsewhere. Then the process exits.

Work is counted with `working()`; what must stop at the grace looks at
`is_past_grace()`.
"""

import logging
import signal
import threading
import time
from contextlib import contextmanager

from studio.runtime import wakeups

log = logging.getLogger(__name__)

# After the grace: how long the work told to stop has to end before the exit.
SETTLE_SECONDS = 5.0

_stopping = threading.Event()
_past_grace = threading.Event()
_idle = threading.Condition()
_work = 0


def shutdown_begin() -> None:
    """This process has been asked to stop."""
    _stopping.set()


def is_shutting_down() -> bool:
    return _stopping.is_set()


def grace_end() -> None:
    """The grace is over: the work still running is told to stop, and
    whatever of it waits is woken to see it."""
    _past_grace.set()
    wakeups.wake_all()


def is_past_grace() -> bool:
    """The grace is over: work still running stops now."""
    return _past_grace.is_set()


@contextmanager
def working():
    """Count what runs inside as work the process waits for before it exits."""
    global _work
    with _idle:
        _work += 1
    try:
        yield
    finally:
        with _idle:
            _work -= 1
            _idle.notify_all()


def work_in_progress() -> int:
    return _work


def _wait_idle(seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    with _idle:
        while _work and (left := deadline - time.monotonic()) > 0:
            _idle.wait(left)
        return not _work


def drain(grace: float) -> bool:
    """Wait for the work in progress to end, up to `grace` seconds; then tell
    what is left to stop and give it SETTLE_SECONDS more. True when all of
    it ended within the grace."""
    shutdown_begin()
    started = time.monotonic()
    if _wait_idle(grace):
        log.info("drained in %.1f s", time.monotonic() - started)
        return True
    log.warning("%d pieces of work still running after %s s: stopping them", _work, grace)
    grace_end()
    _wait_idle(SETTLE_SECONDS)
    return False


def daphne_drain_on_sigterm(grace: float) -> None:
    """Under Daphne, SIGTERM drains the process before its reactor stops
    (Daphne's own handler stops it at once, cutting every request and
    background turn). A second SIGTERM, or SIGINT, stops it at once.
    Call where Daphne loads the application, before its reactor runs."""
    from twisted.internet import reactor

    def stop_now() -> None:
        if reactor.running:
            reactor.stop()

    def drain_then_stop() -> None:
        try:
            drain(grace)
        finally:
            reactor.callFromThread(stop_now)

    def begin() -> None:
        shutdown_begin()
        _stop_listening(reactor)
        threading.Thread(target=drain_then_stop, name="drain", daemon=True).start()

    def on_sigterm(number, frame) -> None:
        reactor._exitSignal = number
        reactor.callFromThread(stop_now if is_shutting_down() else begin)

    # The reactor builds its signal handling from this attribute when it
    # starts running: ours replaces its stop-at-once.
    reactor.sigTerm = on_sigterm
    signal.signal(signal.SIGTERM, on_sigterm)


def _stop_listening(reactor) -> None:
    """Accept no new connections: the listening ports close (open ones stay,
    for what they are still answering)."""
    from twisted.internet import tcp

    for reader in list(reactor.getReaders()):
        if isinstance(reader, tcp.Port):
            reader.stopListening()
