"""The leases of the turns this process runs, renewed together.

A running turn holds a lease (`Turn.lease_until`): a process that dies
stops renewing it, and once it lapses another process takes the turn for
dead (`turn_slot.turns_reap`). Rather than each turn renewing its own
while it waits on its model — a check-out, a statement and a commit per
turn every few seconds, most of the CPU a waiting turn costs — one thread
per process renews them all in one statement: every turn whose lease was
set `every() / 2` seconds ago or more, every `every() / 2` seconds, so
each lease is renewed within `every()` of the last (at most a third of the
lease: two thirds of it are left for a late renewal).

A turn the statement finds cancelled, or no longer running (ended
elsewhere, or taken for dead while the database was away), is woken: it
looks at its own row (`engine._Control`) and stops. A renewal that fails
(the database away) is tried again at the next one; a lease that lapses
meanwhile is the turn's loss, as it would be if the turn renewed it
itself.
"""

import logging
import math
import threading
import time

from django.conf import settings

from agents.sending.turn_slot import leases_renew
from studio.runtime import wakeups

log = logging.getLogger(__name__)

# The longest between two renewals of a lease (at most a third of it).
RENEW_SECONDS = 5.0
# Turns per statement (each its own short transaction).
RENEWED_AT_ONCE = 500


def every() -> float:
    return min(RENEW_SECONDS, settings.STUDIO["TURN_LEASE_SECONDS"] / 3)


class _Keeper:
    def __init__(self):
        self.lock = threading.Lock()
        # each turn's bell, and when its lease was last set (monotonic)
        self.turns: dict[int, tuple[wakeups.Bell, float]] = {}
        self.thread: threading.Thread | None = None
        # what the thread sleeps between renewals; `soon` cuts a sleep short
        # when a turn comes in under a shorter lease than it was planned for
        self.period = math.inf
        self.soon = threading.Event()

    def add(self, turn_id: int, bell: wakeups.Bell) -> None:
        with self.lock:
            self.turns[turn_id] = (bell, time.monotonic())
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="turn-leases", daemon=True)
                self.thread.start()
            elif every() / 2 < self.period:
                self.soon.set()

    def remove(self, turn_id: int) -> None:
        with self.lock:
            self.turns.pop(turn_id, None)

    def _run(self) -> None:
        while True:
            self.period = every() / 2
            self.soon.wait(self.period)
            self.soon.clear()
            self.tick(every() / 2)

    def tick(self, older_than: float) -> None:
        try:
            self.renew(older_than)
        except Exception:  # the database away, most often: tried again at the next one
            log.warning("the running turns' leases could not be renewed", exc_info=True)
        finally:
            wakeups.connection_release()

    def renew(self, older_than: float) -> None:
        """Renew the lease of every registered turn whose lease was set
        `older_than` seconds ago or more; wake those that must stop."""
        now = time.monotonic()
        with self.lock:
            turns = {turn_id: bell for turn_id, (bell, at) in self.turns.items() if now - at >= older_than}
        if not turns:
            return
        ids, going_on = sorted(turns), set()
        for at in range(0, len(ids), RENEWED_AT_ONCE):
            going_on |= leases_renew(ids[at : at + RENEWED_AT_ONCE])
        with self.lock:
            for turn_id in going_on & self.turns.keys():
                self.turns[turn_id] = (self.turns[turn_id][0], now)
        for turn_id, bell in turns.items():
            if turn_id not in going_on:
                bell.set()


_keeper = _Keeper()


def keep(turn_id: int, bell: wakeups.Bell) -> None:
    """Renew the turn's lease from now on, waking `bell` if it must stop."""
    _keeper.add(turn_id, bell)


def release(turn_id: int) -> None:
    _keeper.remove(turn_id)


def renew_due(older_than: float | None = None) -> None:
    """Renew now, in this thread, as the keeper's thread does, the leases
    set `older_than` seconds ago or more (by default those due)."""
    _keeper.tick(every() / 2 if older_than is None else older_than)
