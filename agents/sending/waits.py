"""A turn waiting for the game: its model called a tool the game runs.

The wait lives in the database, not in a process. The turn is `waiting`,
with where its run stands kept on its row (`Turn.run_state`), and each
call it waits on is its `TurnEntry` row (`waiting`, with a deadline). No
thread, database connection or model connection is held meanwhile; the
turn keeps its agent's slot (the next send queues behind it) and its hold.

It goes on when every call of the step has an answer — the game's
(`answer_record`, in any process) or its deadline's (`waits_expire`: the
process that left it waiting looks at the deadline, and the periodic sweep
looks at every waiting turn, so a restart loses nothing). Whoever records
the last answer claims the turn (`running` again, in the same statement
that checks none is still waiting); these return it, for the caller to go
on with it (`engine.tool_result_post`, `engine.waits_expire`).
"""

import heapq
import json
import logging
import threading
import time
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, Min, OuterRef
from django.utils import timezone

from agents.models import Agent, Turn, TurnEntry, TurnStatus
from agents.wire import WAITING_KEYS, tool_call_shown
from studio.errors import Conflict, DomainError, NotFound
from studio.live import event_types
from studio.live.events import publish_on_commit
from studio.ops import logs
from studio.runtime.leases import lease_until

log = logging.getLogger(__name__)

NO_ANSWER = "The game did not answer within {seconds} s: this call has no result."
TURN_ENDED = "Not answered: the turn ended before the game answered."
# An answer with no `result` at all (null is a result: JSON's null).
NO_RESULT = object()


# --- the game's answer -------------------------------------------------------------------------


def answer_record(
    *, agent: Agent, turn_id, call_id: str, result=NO_RESULT, error: str | None = None
) -> tuple[Turn, bool]:
    """Record the game's answer to call `call_id` of the agent's turn: its
    `result` (text, or any JSON value, sent to the model as its JSON) or
    its `error` (text the model reads as an error). 404 for a turn the
    agent has not; 409 for a turn that has ended or waits on no such call,
    and for a call already answered. The turn, and whether this answer was
    the step's last and claimed it (it is `running` again: go on with it
    once this commits)."""
    text, is_error = _answer_text(result, error)
    with transaction.atomic():
        turn = Turn.objects.select_for_update().filter(agent=agent, uuid=turn_id).first()
        if turn is None:
            raise NotFound(f"Agent '{agent.name}' has no turn {turn_id}.", code="turn_not_found")
        if turn.has_ended:
            raise Conflict(
                f"Turn {turn.uuid} has already ended ({turn.status}): the answer was not recorded.",
                code="turn_ended",
            )
        row = TurnEntry.objects.select_for_update().filter(turn=turn, call_id=call_id).first()
        if row is None:
            raise Conflict(
                f"Turn {turn.uuid} has no call '{str(call_id)[:80]}' of a game tool: the answer was not "
                "recorded. The calls it waits on are its pendingToolCalls.",
                code="unknown_call",
            )
        if not row.waiting:
            raise Conflict(
                f"Call '{call_id}' of turn {turn.uuid} was answered already (or its deadline passed): "
                "this answer was not recorded.",
                code="call_answered",
            )
        _answer(turn, row, text, is_error, by="game")
        claimed = claim_if_answered(turn)
    turn.refresh_from_db()
    return turn, claimed


def _answer_text(result, error) -> tuple[str, bool]:
    most = settings.STUDIO["MAX_TOOL_RESULT_CHARS"]
    if (result is NO_RESULT) == (error is None):
        raise DomainError("An answer has either 'result' (what the tool gave) or 'error' (why it failed).")
    if error is not None:
        if not isinstance(error, str) or not error.strip():
            raise DomainError("'error' is a sentence the model reads: why the tool failed.")
        text, is_error = error, True
    else:
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        is_error = False
    if len(text) > most:
        raise DomainError(
            f"The answer is {len(text):,} characters; a tool's answer is at most {most:,} "
            "(STUDIO_MAX_TOOL_RESULT_CHARS).",
            status=413,
            code="too_large",
        )
    from studio.text import unstorable_reason

    reason = unstorable_reason(text)
    if reason:
        raise DomainError(f"The answer cannot be kept: {reason}.")
    return text, is_error


def _answer(turn: Turn, row: TurnEntry, text: str, is_error: bool, *, by: str) -> None:
    """Write the answer into its call's entry (that row alone), and say so
    after commit. Inside the caller's transaction, the turn's row locked."""
    entry = {k: v for k, v in row.entry.items() if k not in WAITING_KEYS}
    entry.update(result=text, isError=is_error)
    TurnEntry.objects.filter(pk=row.pk).update(entry=entry, waiting=False)
    shown = tool_call_shown(entry, block=turn.block_number)
    publish_on_commit(
        turn.agent_id,
        event_types.tool_answered(
            agent=turn.agent.name,
            turn_id=str(turn.uuid),
            call_id=row.call_id,
            name=entry["name"],
            result=shown["result"],
            is_error=is_error,
            by=by,
            cut=shown.get("cut"),
        ),
    )


def claim_if_answered(turn: Turn) -> bool:
    """Make the waiting turn `running` again when none of its calls still
    waits — in one statement, so of two last answers at once only one goes
    on with it. True when this one did. Inside the caller's transaction."""
    still = TurnEntry.objects.filter(turn=turn, waiting=True)
    if still.exists():
        return False
    return bool(
        Turn.objects.filter(pk=turn.pk, status=TurnStatus.WAITING).update(
            status=TurnStatus.RUNNING, lease_until=_lease()
        )
    )


def _lease():
    return lease_until(settings.STUDIO["TURN_LEASE_SECONDS"])


# --- deadlines ----------------------------------------------------------------------------------


def waits_expire(*, turn_id=None) -> tuple[bool, list[Turn], list[tuple]]:
    """Answer every waiting call whose deadline has passed (of one turn, or
    of every turn) with an error the model reads, and claim the waiting
    turns that wait on no call any more (answered, but the process that
    claimed them stopped before going on: `turn_slot.live_head`). Whether
    there were any, the turns claimed, to go on with, and (turn id, next
    deadline) of those still waiting on a later call — their lease moved to
    it, for a timer to wake there."""
    now = timezone.now()
    due = TurnEntry.objects.filter(waiting=True, deadline__lte=now)
    answered = Turn.objects.filter(status=TurnStatus.WAITING, lease_until__lte=now).exclude(
        Exists(TurnEntry.objects.filter(turn=OuterRef("pk"), waiting=True))
    )
    if turn_id is not None:
        due, answered = due.filter(turn__uuid=turn_id), answered.filter(uuid=turn_id)
    found, claimed, later = False, [], []
    for turn_pk in set(due.values_list("turn_id", flat=True)) | set(answered.values_list("pk", flat=True)):
        found = True
        with transaction.atomic():
            turn = Turn.objects.select_for_update().select_related("agent").filter(pk=turn_pk).first()
            if turn is None or turn.status != TurnStatus.WAITING:
                continue
            for row in TurnEntry.objects.filter(turn=turn, waiting=True, deadline__lte=timezone.now()):
                seconds = row.entry.get("timeoutSeconds", "its")
                _answer(turn, row, NO_ANSWER.format(seconds=seconds), True, by="deadline")
            if claim_if_answered(turn):
                claimed.append(turn)
                continue
            upcoming = TurnEntry.objects.filter(turn=turn, waiting=True).aggregate(next=Min("deadline"))[
                "next"
            ]
            if upcoming is not None:
                Turn.objects.filter(pk=turn.pk).update(lease_until=upcoming)
                later.append((turn.uuid, upcoming))
    return found, claimed, later


def waiting_calls_close(turn: Turn) -> None:
    """A waiting turn that ends (a cancel, its deadline): each call still
    waiting gets an error result saying so. Inside the caller's transaction."""
    for row in TurnEntry.objects.filter(turn=turn, waiting=True):
        _answer(turn, row, TURN_ENDED, True, by="turn_ended")


# --- this process's timer --------------------------------------------------------------------------


class Timer:
    """One thread per process that wakes at the deadlines of the turns this
    process left waiting, and calls `expire(turn_id)` then. (The sweep does
    the same for every turn, whichever process left it.)"""

    def __init__(self, expire):
        self.expire = expire
        self.due: list[tuple[float, str]] = []
        self.lock = threading.Condition()
        self.thread: threading.Thread | None = None

    def add(self, turn_id, at: datetime) -> None:
        turn_id = str(turn_id)
        wake = time.monotonic() + max((at - timezone.now()).total_seconds(), 0) + 0.05
        with self.lock:
            heapq.heappush(self.due, (wake, turn_id))
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="game-tool-deadlines", daemon=True)
                self.thread.start()
            self.lock.notify()

    def forget(self) -> None:
        """Drop every deadline not yet reached (the sweep still answers
        them): for a test whose data goes with it."""
        with self.lock:
            self.due.clear()

    def _run(self) -> None:
        while True:
            with self.lock:
                while not self.due or self.due[0][0] > time.monotonic():
                    self.lock.wait(timeout=(self.due[0][0] - time.monotonic()) if self.due else None)
                _, turn_id = heapq.heappop(self.due)
            try:
                with logs.work_context(turn=turn_id):
                    self.expire(turn_id)
            except Exception:  # the sweep tries again
                log.warning(
                    "turn %s: its calls past their deadline could not be answered", turn_id, exc_info=True
                )
            finally:
                connection.close()
