"""The periodic sweep: what no request will tidy soon enough.

A turn whose process died (its lease lapsed) is ended by its agent's next
send, and a compaction whose worker died is handed out again when its
agent next asks for one — but an idle agent asks for nothing, and the
holds and live-turn places such leftovers keep belong to the whole game.
Every STUDIO_SWEEP_SECONDS (30) the sweep ends lapsed turns, charges the
model calls dead processes left open, hands out lapsed compactions again
and ends as failed the replays whose process stopped (a replay's task is
not delivered again), across every game, logging each at WARNING; then it
removes the copies of ended replays whose model calls were still to be
charged when their replay ended (`replays.replay_copies_remove`), and
sends out again the budget alerts whose deliveries are overdue
(`billing.alerts`).

It runs as a Celery beat task (`agents.tasks.sweep_task`, in the `beat`
process of the Procfile), or from a timer as `manage.py sweep` where there
is no broker. Everything it does is a conditional update, so two sweeps at
once (or a sweep and a send) do each thing once.
"""

import logging

from agents.replays import replay_copies_remove, replays_lapsed_end
from agents.sending.engine import waits_expire
from agents.sending.turn_slot import turns_reap
from billing import alerts
from studio.ops.jobs import job_ran

log = logging.getLogger(__name__)


def sweep() -> bool:
    """One sweep; True when it found anything to tidy."""
    found = turns_reap()
    if found:
        log.info("the sweep ended, settled or handed out again what dead processes left")
    expired = waits_expire()
    if expired:
        log.info("the sweep answered game tool calls past their deadlines")
    found = found or expired
    given_up = replays_lapsed_end()
    if given_up:
        log.info("the sweep gave up %d replays whose process stopped", given_up)
    found = found or bool(given_up)
    removed = replay_copies_remove()
    if removed:
        log.info("the sweep removed %d ended replays' copies", removed)
    resent = alerts.deliveries_resend()
    if resent:
        log.info("the sweep sent out again %d overdue alert deliveries", resent)
    job_ran("sweep")  # the dead man's switch an operator alerts on (studio/ops/jobs.py)
    return found or bool(removed) or bool(resent)
