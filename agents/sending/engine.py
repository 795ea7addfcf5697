"""What happens on a send.

1. Refused at once, holding nothing, when it cannot run: bad content (400),
   a message that could never fit the agent's context (413
   `context_too_large`), a full queue (429 `agent_busy`), a game that
   cannot pay (402). A repeat of an earlier send under the same
   Idempotency-Key gets that send's turn instead.
2. The turn is queued: a `Turn` row, whose id orders the agent's sends by
   arrival, holding what its first model call can cost. It starts when no
   earlier send of the agent is still live — decided under the agent row's
   lock in a short transaction, so it holds across processes. A queued send
   waits holding no database connection (`studio.runtime.wakeups`). A
   non-transient turn gets the next block number as it starts, and its
   block starts with the player's message.
3. The loop: assemble the context (stored checkpoint block + verbatim blocks
   + this turn's block so far), call the model with no transaction open,
   charge its tokens; run each tool call in its own short transaction with
   its entry in the block and its "Memory access" fee; repeat until the
   model answers, within `MAX_MODEL_STEPS`. The answer's text goes to the
   agent's listeners as it is written (`reply.delta`), with no database
   work. Before each call after the
   first, the turn's hold must still be covered (and grows when the context
   has): spend never runs past what the game holds.
4. The turn ends `completed`, `cancelled` (a cancel was asked for) or
   `failed` (with why, and a code): the block keeps everything it got.

A turn holds a lease it renews while it works or waits; a turn whose
process died lets it lapse, and the agent's next send — or a send of its
game that would otherwise be refused for want of credits — ends it as
failed, giving its hold back. No turn outlives `TURN_DEADLINE_SECONDS`.
A transient send runs the same loop with no tools and no block: it leaves
no trace in the agent's history.

The turn slot — queueing, waiting, dead turns, ending, cancel, and the one
lock order every transaction keeps — is `turn_slot`.
"""

import copy
import functools
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import DataError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from agents import compaction
from agents.game_tools import arguments_refusal, tool_timeout
from agents.models import Agent, Block, CompactionReason, Turn, TurnEntry, TurnStatus, entries_so_far
from agents.providers import causes, provider_for, tool_tokens
from agents.providers.base import (
    FIRST_POLL_SECONDS,
    UNREADABLE,
    AbandonedCall,
    CallEnd,
    CallThreads,
    Cancelled,
    Control,
    ModelReply,
    ModelRequest,
    ProviderError,
    Usage,
    usage_total,
)
from agents.sending import leases, turn_slot, waits
from agents.sending.context import (
    Context,
    Start,
    assistant_entry,
    context_assemble,
    entries_to_messages,
    entries_tokens,
    tool_call_entry,
    user_entry,
    verbatim_extend,
)
from agents.services import replay_copy_check
from agents.wire import tool_call_shown
from billing import ledger
from memories.tools import MEMORY_TOOLS, tool_run
from studio.errors import DomainError
from studio.live import event_types
from studio.live.events import publish, publish_on_commit
from studio.ops import logs, metrics
from studio.runtime import sql, wakeups
from studio.serving import lifecycle
from studio.text import storable, storable_json, unstorable_reason
from studio.tokens import count_message_tokens, count_tokens

log = logging.getLogger(__name__)

CONTROL_POLL_SECONDS = 0.2
# What the database raises while it cannot be reached (a connection pool
# with none to give in time included), and how often a turn that waits for
# it to answer again tries.
DATABASE_DOWN = (OperationalError, InterfaceError)
DATABASE_LOOK_SECONDS = 0.5
# Text the model writes sooner than this after the last reply.delta waits
# to go out with the next one.
DELTA_SECONDS = 0.05
CONTENT_MAX_CHARS = 100_000
IDEMPOTENCY_KEY_MAX_CHARS = 200


def _connection_release() -> None:
    """With a connection pool (STUDIO_DB_POOL), hand this thread's database
    connection back to it while the turn waits on its model; the next query
    takes one again. Otherwise every running turn would hold a connection
    for the whole model call, and a pool of 20 would cap a process at 20
    turns in flight however slow the model. Not inside a transaction."""
    if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
        connection.close()


class TurnFailed(Exception):
    """End the running turn as failed, with `code` and a sentence."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.message, self.code = message, code


class _Waiting(Exception):
    """A model step's calls of the game's tools wait for the game's
    answers; with `stop`, the turn must stop once they have come."""

    def __init__(self, step: int, stop: "_MustStop | None"):
        super().__init__(step)
        self.step, self.stop = step, stop


class _MustStop(Exception):
    """The turn must stop before its model has answered in words (out of
    steps, of tool calls, of credits): the model is asked once more with no
    tools (`_wrap_up`). `code` and `message` say why."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


# What the model is told on the call that ends a turn that must stop.
WRAP_UP_NOTE = "(No more tool calls in this turn: answer the player now, in words.)"
# A last call with room for fewer output tokens than this is not made.
WRAP_UP_MIN_OUTPUT_TOKENS = 16
# The result of a call not run because the game could not pay its fee.
FEE_NOT_COVERED = (
    "Not run: the game cannot pay for another tool call in this turn. Nothing was changed; "
    "answer the player now."
)


class CommitUnknown(OperationalError):
    """The database failed as a step's transaction committed: whether it
    did is not known, so the step is not done again."""


class DeadlinePassed(Cancelled):
    """The turn has been live for TURN_DEADLINE_SECONDS: a provider stops as
    for a cancel, and the turn ends failed."""


class ShuttingDown(Cancelled):
    """The process is stopping and its grace is over: a provider stops as
    for a cancel, and the turn ends failed (`shutdown`)."""


# --- the send ------------------------------------------------------------------


@dataclass(frozen=True)
class SendResult:
    """A send's ended turn, with the cost and block entries its run ended
    it with, so the answer need not read them back (`wire.turn_wire`).
    Both are None when this send did not end the turn: a repeat under an
    Idempotency-Key, a turn cancelled while queued, or ended elsewhere."""

    turn: Turn
    cost: dict | None = None
    entries: list | None = None


def send(
    *,
    agent: Agent,
    content: str,
    transient: bool = False,
    idempotency_key: str | None = None,
    replaying: bool = False,
    answers=None,
) -> SendResult:
    """Run one send to `agent` to its end. With `idempotency_key`, a repeat
    of an earlier send gets its turn (waiting for it to end) instead of
    running another. A replay's copy takes only its replay's sends
    (`replaying`); `answers(name, arguments) -> {"result", "isError", …}`
    answers its calls of the game's tools at once, instead of waiting for
    the game (what it gives is kept in the call's entry)."""
    # Listening before the turn is queued: a cancel may come as soon as it is committed.
    with wakeups.listening(wakeups.cancel_key(agent.pk)) as cancels:
        queued = _queue(agent, content, transient, idempotency_key, replaying=replaying)
        queued.answers, queued.cancels = answers, cancels.event
        return queued.run()


# A send that runs on without its request (a stream's, `wait: false`) runs
# on one of these, kept from send to send.
# Speed: a thread (and its database connection's wrapper) made for every such send; guarded by bench/paired.py --stream (server CPU per message).
SEND_THREADS = CallThreads(name="send")


def send_start(
    *,
    agent: Agent,
    content: str,
    transient: bool = False,
    idempotency_key: str | None = None,
    on_end: Callable[[SendResult | None], None] | None = None,
) -> tuple[Turn, bool]:
    """Queue one send to `agent` and run it on in a thread of this process;
    return at once with its turn (queued or running) and True — or, for a
    repeat under `idempotency_key`, the earlier send's turn and False. The
    refusals of step 1 are raised here. The thread holds no database
    connection while the send waits its turn; if the process dies, the
    turn's lease lapses and the agent's next send ends it. `on_end` is
    called in the thread with the run's result as it ends (None when the
    run raised)."""
    # Listening before the turn is queued (as `send`), until the thread ends.
    listening = ExitStack()
    cancels = listening.enter_context(wakeups.listening(wakeups.cancel_key(agent.pk)))
    try:
        queued = _queue(agent, content, transient, idempotency_key, follows=False)
        turn = copy.copy(queued.turn)  # the thread changes its own
        if queued.is_new:
            queued.cancels = cancels.event
            # Under the request's id.
            run = logs.carry_log_context(queued.run_in_background)
            SEND_THREADS.run(functools.partial(run, on_end, listening))
        else:
            listening.close()
    except BaseException:
        listening.close()
        raise
    return turn, queued.is_new


def tool_result_post(
    *, agent: Agent, turn_id, call_id: str, result=waits.NO_RESULT, error: str | None = None
) -> Turn:
    """The game's answer to a call of one of its tools that a turn waits on
    (`waits.answer_record`); when it was the step's last, the turn goes on
    here, once the answer is committed."""
    turn, claimed = waits.answer_record(
        agent=agent, turn_id=turn_id, call_id=call_id, result=result, error=error
    )
    if claimed:
        transaction.on_commit(lambda: turn_resume(turn))
    return turn


def waits_expire(*, turn_id=None) -> bool:
    """Calls past their deadlines answered as unanswered (`waits.waits_expire`),
    and each turn that then waits on nothing gone on with here. True when
    there were any."""
    found, claimed, later = waits.waits_expire(turn_id=turn_id)
    for turn in claimed:
        transaction.on_commit(lambda turn=turn: turn_resume(turn))
    for waiting_id, deadline in later:  # a later call's deadline, watched here from now on
        _deadlines.add(waiting_id, deadline)
    return found


# This process's timer: it looks at the turns it left waiting at their deadlines.
_deadlines = waits.Timer(lambda turn_id: waits_expire(turn_id=turn_id))


def turn_resume(turn: Turn) -> None:
    """Go on with a turn that waited for the game, claimed (`running`
    again) by this process (`agents.sending.waits`): in a thread of its
    own, from the step after the one that waited."""
    threading.Thread(
        target=logs.carry_log_context(_resumed_run),
        args=(turn.pk,),
        name=f"resume-{turn.uuid}",
        daemon=True,
    ).start()


def _resumed_run(turn_pk: int) -> None:
    try:
        with lifecycle.working():
            turn = Turn.objects.select_related("agent__game").filter(pk=turn_pk).first()
            if turn is None or turn.status != TurnStatus.RUNNING or turn.run_state is None:
                return
            # Taken up here, in one statement: from now on a stop of this
            # process may have left a model call open, and ends the turn
            # (`turn_slot._death`) instead of going on with it again.
            if not Turn.objects.filter(pk=turn_pk, status=TurnStatus.RUNNING, run_state__isnull=False).update(
                run_state=None, lease_until=turn_slot.lease()
            ):
                return
            agent = turn.agent
            with logs.work_context(game=agent.game.slug, agent=agent.name, turn=turn.uuid):
                run, state = _TurnRun.resumed(agent, turn)
                stop = _MustStop(*state["stop"]) if state.get("stop") else None
                try:
                    run.run(first_step=state["step"] + 1, stop=stop)
                except BaseException as error:
                    _end_abruptly(turn, error, run)
                    raise
    except Exception:  # the turn has ended as failed, saying why
        log.warning("turn %s: going on after the game's answers failed", turn_pk, exc_info=True)
    finally:
        connection.close()


def _end_abruptly(turn: Turn, error: BaseException, run: "_TurnRun | None" = None) -> None:
    """End a turn whose run raised `error` as failed, saying why, charged
    what its model calls were billed and it had not yet charged (`run`'s).
    The database having gone away is waited for first (as long as the turn
    may live), so that is what the turn is said to have failed of — not
    taken, its lease lapsed, for a turn whose process stopped."""
    # After a commit whose outcome is unknown the step may have charged it:
    # then nothing more is charged here (never twice).
    owed = run.owed() if run is not None and not isinstance(error, CommitUnknown) else None
    if not isinstance(error, DATABASE_DOWN):
        turn_slot.turn_end_abruptly(
            turn, "The studio hit an internal error while running this turn.", owed=owed
        )
        return
    try:
        _Control(turn).database_wait()
    except Cancelled:  # past its deadline, or its process stops: its lease lapses
        return
    turn_slot.turn_end_abruptly(
        turn,
        "The studio's database became unavailable in the middle of this turn, and the turn could not go on.",
        code="database_unavailable",
        owed=owed,
    )


def _price_state(price) -> dict:
    return {
        "model": price.model,
        "input": str(price.input_per_mtok),
        "output": str(price.output_per_mtok),
        "cachedInput": str(price.cached_input_per_mtok),
    }


def _price_from_state(state: dict):
    from billing.models import ModelPrice

    return ModelPrice(
        model=state["model"],
        input_per_mtok=Decimal(state["input"]),
        output_per_mtok=Decimal(state["output"]),
        cached_input_per_mtok=Decimal(state["cachedInput"]),
    )


@dataclass
class _Queued:
    agent: Agent
    turn: Turn
    is_new: bool
    content: str
    new_tokens: int
    rates: ledger.Rates | None
    start: Start | None  # what its start read, when it started at once
    following: bool = False  # a repeat among the earlier turn's followers
    answers: Callable | None = None  # what answers its game tool calls instead of the game
    cancels: wakeups.Bell | None = None  # set when a cancel may have come (`_Control`)

    def run(self) -> SendResult:
        """Wait for the turn's start (or, for a repeat, its end), then run it."""
        agent, turn = self.agent, self.turn
        with logs.work_context(game=_game_label(agent), agent=agent.name, turn=turn.uuid):
            if not self.is_new:
                return SendResult(turn_slot.turn_follow(turn, following=self.following))
            start = self.start
            if turn.status == TurnStatus.QUEUED:
                turn = turn_slot.turn_wait(turn, self.content)
                if turn.has_ended:
                    return SendResult(turn)
                start = None  # read afresh: a compaction may have run meanwhile
            run = None
            try:
                run = _TurnRun(agent, turn, self.content, self.new_tokens, self.rates, start, self.cancels)
                run.answers = self.answers
                return run.run()
            except BaseException as error:
                _end_abruptly(turn, error, run)
                raise

    def run_in_background(
        self, on_end: Callable[[SendResult | None], None] | None = None, listening: ExitStack | None = None
    ) -> None:
        result = None
        try:
            with lifecycle.working():  # a process that drains waits for it
                result = self.run()
        except Exception:  # the turn has ended as failed, saying why (where the database let it)
            log.warning("turn %s: a send run in the background failed", self.turn.uuid, exc_info=True)
        finally:
            if listening is not None:
                listening.close()
            connection.close()
            if on_end is not None:
                on_end(result)


def _queue(
    agent: Agent,
    content: str,
    transient: bool,
    idempotency_key: str | None,
    *,
    follows: bool = True,
    replaying: bool = False,
) -> _Queued:
    """Step 1 and the start of step 2: check the send and queue its turn.
    Its rates are read as it is queued: a price change applies from the
    next turn on, and every line keeps the price it was charged at."""
    if not replaying:
        replay_copy_check(agent, then="Send to the agent it replays, or fork this copy to play on from it.")
    content_check(content)
    if idempotency_key is not None:
        idempotency_key_check(idempotency_key)
    new_tokens = count_tokens(content)
    if transient:
        _transient_fits_check(agent, new_tokens)
    request = turn_slot.SendRequest(content, transient, idempotency_key, new_tokens, follows=follows)
    queued = turn_slot.turn_enqueue(agent, request)
    return _Queued(
        agent, queued.turn, queued.is_new, content, new_tokens, queued.rates, queued.start, queued.following
    )


def _transient_fits_check(agent: Agent, new_tokens: int) -> None:
    """A transient send leaves no trace — no compaction either: one whose
    context would pass maxTokens cannot wait for one to make room, and is
    refused (413) before anything is held or run."""
    needed = context_assemble(agent, transient=True).total_tokens + new_tokens
    if needed > agent.max_tokens:
        raise DomainError(_transient_too_large(agent, needed), status=413, code="context_too_large")


def _transient_too_large(agent: Agent, needed: int) -> str:
    return (
        f"This transient send's context would be {needed} tokens, over maxTokens {agent.max_tokens}. "
        "A transient send leaves no trace, so it does not compact the agent's history to make room: "
        "send it as a normal send, or shorter."
    )


def _game_label(agent: Agent):
    """The game's slug for log lines — or its id, when the game was not
    loaded with the agent (no query is made for a log line)."""
    return agent.game.slug if Agent.game.is_cached(agent) else agent.game_id


def content_check(content) -> None:
    """The player's message: a non-empty string the database can keep, of
    at most CONTENT_MAX_CHARS characters (the API and the pages alike)."""
    if not isinstance(content, str) or not content.strip():
        raise DomainError("'content' must be a non-empty string: what the player says.")
    if len(content) > CONTENT_MAX_CHARS:
        raise DomainError(
            f"'content' is over {CONTENT_MAX_CHARS:,} characters.", status=413, code="too_large"
        )
    reason = unstorable_reason(content)
    if reason:
        raise DomainError(f"'content' cannot be kept: {reason}.")


def idempotency_key_check(key) -> None:
    if not isinstance(key, str) or not key.strip() or len(key) > IDEMPOTENCY_KEY_MAX_CHARS:
        raise DomainError(
            f"The Idempotency-Key header must be 1–{IDEMPOTENCY_KEY_MAX_CHARS} characters, "
            "e.g. a UUID the client makes for each message it sends.",
            code="invalid_idempotency_key",
        )
    reason = unstorable_reason(key)
    if reason:
        raise DomainError(f"The Idempotency-Key cannot be kept: {reason}.", code="invalid_idempotency_key")


# --- the loop ----------------------------------------------------------------------


class _Control(Control):
    """Lets a provider see a cancel while it works; renews the turn's lease;
    ends the turn at its deadline. A database that stops answering is
    waited for (`database_wait`): the model call goes on meanwhile, and the
    turn with it once the database answers — unless another process took
    the turn for dead meanwhile (its lease lapsed), which then ends here as
    a cancel does.

    A cancel wakes the turn (`wakeups.cancel_key`: `woken`, listened for
    since before the turn was queued, or from `listening` on): its row is
    looked at then. While it runs here its lease is renewed with the
    process's other turns' (`leases`), which wakes it too when its row says
    it must stop (a cancel whose wake-up was lost, an end made elsewhere).
    A turn that did not listen before it could be cancelled (one gone on
    with after the game's answers) looks at its first poll too. The
    deadline and the process's shutdown are seen without the database, at
    most every CONTROL_POLL_SECONDS (a streamed call checks at each piece).
    A turn blocked on its model sleeps (`quiet_seconds`): it wakes to give
    its connection back, at its deadline, and when rung (`ringing`): for a
    cancel, when its lease's renewal finds it must stop, and at the end of
    its process's shutdown grace (`lifecycle.grace_end` wakes every
    waiter)."""

    def __init__(self, turn: Turn, woken: wakeups.Bell | None = None):
        self.turn = turn
        self.next_poll = time.monotonic() + CONTROL_POLL_SECONDS
        self.next_look = self.next_poll if woken is None else math.inf
        self.woken = woken
        self.deadline = turn.created_at + timedelta(seconds=settings.STUDIO["TURN_DEADLINE_SECONDS"])
        self.release_at: float | None = None

    def hold_release(self) -> None:
        """A model call begins: the turn's connection goes back to the pool
        at the call's first look (FIRST_POLL_SECONDS from now), unless the
        answer comes first and the turn uses it again."""
        # Speed: a pool check-out (its health check's round trip) and a Django connect per model call that answers at once; guarded by bench/agent_server.py (server CPU per message).
        self.release_at = time.monotonic() + FIRST_POLL_SECONDS

    def hold_end(self) -> None:
        self.release_at = None

    @contextmanager
    def listening(self):
        """While the turn runs here: a cancel wakes it, and its lease is kept."""
        with ExitStack() as stack:
            if self.woken is None:
                self.woken = stack.enter_context(
                    wakeups.listening(wakeups.cancel_key(self.turn.agent_id))
                ).event
                stack.callback(setattr, self, "woken", None)
            # Speed: a check-out, a statement and a commit per waiting turn every 5 s; guarded by bench/players.py (CPU a second per send waiting on the model).
            leases.keep(self.turn.pk, self.woken)
            stack.callback(leases.release, self.turn.pk)
            yield

    @contextmanager
    def ringing(self, ring):
        woken = self.woken
        if woken is None:
            yield
            return
        woken.ring = ring
        try:
            if woken.is_set():  # woken before the bell was hung
                ring()
            yield
        finally:
            woken.ring = None

    def quiet_seconds(self) -> float:
        now = time.monotonic()
        # a hair past the deadline, so that the check it wakes for sees it passed
        to_deadline = (self.deadline - timezone.now()).total_seconds() + 0.01
        # `check` acts no sooner than `next_poll` unless woken
        due = max(self.next_poll, min(self.next_look, now + to_deadline))
        if self.release_at is not None:
            due = min(due, self.release_at)
        return max(0.0, due - now)

    def check(self) -> None:
        now = time.monotonic()
        if self.release_at is not None and now >= self.release_at:
            self.release_at = None
            _connection_release()
        woken = self.woken is not None and self.woken.is_set()
        if now < self.next_poll and not woken:
            return
        self.next_poll = now + CONTROL_POLL_SECONDS
        if woken or now >= self.next_look:
            self._look()
        if timezone.now() > self.deadline:
            raise DeadlinePassed()
        if lifecycle.is_past_grace():
            raise ShuttingDown()

    def _look(self) -> None:
        if self.woken is not None:
            self.woken.clear()  # before the read: a cancel committed after it wakes again
        self.next_look = math.inf
        while True:
            try:
                goes_on = turn_slot.lease_renew(self.turn)
                break
            except DATABASE_DOWN:
                self.database_wait()
        _connection_release()  # back to waiting on the model
        if not goes_on:
            raise Cancelled()

    def database_wait(self) -> None:
        """Wait, holding no connection, until the database answers again —
        at most until the turn's deadline (DeadlinePassed) or the end of
        its process's shutdown grace (ShuttingDown)."""
        log.warning("turn %s: the database is unavailable; the turn waits for it", self.turn.uuid)
        while True:
            with suppress(Exception):  # a broken connection may fail to close
                connection.close()
            if timezone.now() > self.deadline:
                raise DeadlinePassed()
            if lifecycle.is_past_grace():
                raise ShuttingDown()
            time.sleep(DATABASE_LOOK_SECONDS)
            try:
                connection.ensure_connection()
            except DATABASE_DOWN:
                continue
            log.warning("turn %s: the database answers again; the turn goes on", self.turn.uuid)
            return

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
            self.check()


class _ReplyDeltas:
    """The reply as the model writes it, published to the agent's listeners
    as `reply.delta` events: joined, a turn's deltas after its last
    `tool_call` event are exactly its reply. A step that ends in tool calls
    drops the text it still holds: what a model writes before a tool call
    is not the reply."""

    def __init__(self, agent: Agent, turn: Turn):
        self.agent_id, self.agent_name, self.turn_id = agent.pk, agent.name, str(turn.uuid)
        self.step_start()

    def step_start(self) -> None:
        self.written: list[str] = []  # this step's text
        self.held: list[str] = []  # what is not published yet
        self.next_at = time.monotonic() + DELTA_SECONDS

    def add(self, piece: str) -> None:
        piece = storable(piece)
        self.written.append(piece)
        self.held.append(piece)
        if time.monotonic() >= self.next_at:
            self._publish()

    def finish(self, reply: str) -> None:
        """The step's text is the reply: publish what is held, and what of
        the reply the model did not stream (a server that answers whole)."""
        written = "".join(self.written)
        if reply.startswith(written):
            self.held.append(reply[len(written) :])
        self._publish()

    def _publish(self) -> None:
        text = "".join(self.held)
        self.held.clear()
        self.next_at = time.monotonic() + DELTA_SECONDS
        if text:
            publish(
                self.agent_id, event_types.reply_delta(agent=self.agent_name, turn_id=self.turn_id, text=text)
            )


class _TurnRun:
    def __init__(self, agent: Agent, turn: Turn, content: str, new_tokens: int, rates, start, cancels=None):
        self.agent = agent
        self.turn = turn
        self.context: Context = context_assemble(agent, transient=turn.is_transient, start=start)
        self.entries = [user_entry(content)]
        self.stored_entries = 1  # how many of `entries` the block holds
        self.new_tokens = new_tokens
        self.control = _Control(turn, cancels)
        self.price, self.fee = rates.price, rates.memory_access
        # A model step's tokens are charged in the transaction that records
        # what the step did (its tool call, or the turn's end).
        self.unbilled: ModelReply | None = None
        self.bill = ledger.TurnBill(game_id=agent.game_id, agent_name=agent.name, turn_id=turn.uuid)
        self.reply_deltas = _ReplyDeltas(agent, turn)
        # The input tokens of the model call in flight (what it is billed
        # for when its usage never comes), and a call the turn stopped
        # waiting for, which is charged when it ends.
        self.call_tokens = 0
        self.abandoned: AbandonedCall | None = None
        # Earlier attempts of the unbilled step the provider could bill (a
        # retry followed them), and the tool calls the turn has run.
        self.unbilled_attempts: list[Usage] = []
        self.tool_calls_run = 0
        # This step's calls of the game's tools, waiting for its answers:
        # (deadline, `tool.requested` event), the events sent once the turn
        # waits (a game that reads the turn as it hears one finds the call
        # pending there); and, for a replay's copy, what answers them
        # instead: (name, arguments) -> {"result", "isError", …}.
        self.waiting: list[tuple[datetime, dict]] = []
        self.answers = None
        # A step failed and the bill could not be read back then: read it
        # before the next step.
        self.bill_stale = False

    @classmethod
    def resumed(cls, agent: Agent, turn: Turn) -> tuple["_TurnRun", dict]:
        """The run of a turn that waited for the game, as it stood then —
        its entries with the game's answers, its bill, its rates — and the
        state it was left with."""
        state = turn.run_state
        rates = ledger.Rates(price=_price_from_state(state["price"]), memory_access=Decimal(state["fee"]))
        start = Start(checkpoint_id=state["checkpointId"], block_number=turn.block_number)
        run = cls(agent, turn, "", 0, rates, start)
        first = Block.objects.filter(turn=turn).values_list("entries", flat=True).first() or []
        run.entries = list(first) + entries_so_far([turn.pk]).get(turn.pk, [])
        run.stored_entries = len(run.entries)
        run.new_tokens = entries_tokens(run.entries)
        run.tool_calls_run = state["toolCallsRun"]
        run.bill.reload()
        return run, state

    def run(self, *, first_step: int = 1, stop: "_MustStop | None" = None) -> SendResult:
        """The turn from its first model step — or, for a turn that waited
        for the game, from the step after the one that waited (`stop`: why
        it must stop once the game has answered)."""
        with self.control.listening():
            return self._run(first_step, stop)

    def _run(self, first_step: int, stop: "_MustStop | None") -> SendResult:
        try:
            if first_step == 1:
                self._make_room()
            try:
                if stop is not None:
                    raise stop
                return self._play(first_step)
            except _MustStop as stop:
                return self._wrap_up(stop)
            except _Waiting as waiting:
                return self._wait(waiting.step, waiting.stop)
        except ShuttingDown as stop:
            self.abandoned = getattr(stop, "call", None)
            return self._fail(
                "The studio's process was restarting and this turn did not end within its grace "
                "(STUDIO_SHUTDOWN_GRACE_SECONDS); nothing more will happen in it.",
                "shutdown",
            )
        except DeadlinePassed as stop:
            self.abandoned = getattr(stop, "call", None)
            deadline = settings.STUDIO["TURN_DEADLINE_SECONDS"]
            return self._fail(
                f"The turn did not end within {deadline} s (STUDIO_TURN_DEADLINE_SECONDS).", "deadline"
            )
        except Cancelled as stop:
            self.abandoned = getattr(stop, "call", None)
            return self._end(TurnStatus.CANCELLED)
        except ProviderError as error:
            metrics.model_call_failed(self.agent.model, error.kind)
            # Whatever the provider bills for the failed call is owed all the same.
            text = "".join(self.reply_deltas.written)
            usage = self._billed(CallEnd(error.usage, error.reached, text))
            attempts = list(error.failed_attempts)
            if usage is not None or attempts:
                if usage is not None:
                    metrics.model_tokens_used(usage)
                self.unbilled = ModelReply(text=None, usage=usage or Usage())
                self.unbilled_attempts = attempts
            code = "model_output_invalid" if error.public == UNREADABLE else "model_error"
            return self._fail(model_error_text(error, self.turn), code, error_class=error.cause)
        except TurnFailed as failure:
            return self._fail(failure.message, failure.code)
        except DataError:
            log.warning("turn %s: the database refused what the model sent", self.turn.uuid, exc_info=True)
            return self._fail(
                "The studio could not store what the model sent in this step.", "unstorable_output"
            )

    def _play(self, first_step: int = 1) -> SendResult:
        """Model steps until the model answers in words; `_MustStop` when
        the turn runs out of steps, of tool calls or of credits first, and
        `_Waiting` when a step's calls of the game's tools wait for it."""
        most = settings.STUDIO["MAX_MODEL_STEPS"]
        for step in range(first_step, most + 1):
            reply = self._step_call(step, self._request())
            if not reply.tool_calls:
                return self._complete(reply)
            if reply.text:
                with self._step():
                    self._record({**assistant_entry(reply.text), "step": step})
            self.waiting = []
            try:
                self._tool_calls(reply.tool_calls, step)
            except _MustStop as stop:
                if self.waiting:  # the game answers first: the model is owed those results
                    raise _Waiting(step, stop) from None
                raise
            if self.waiting:
                raise _Waiting(step, None)
        raise _MustStop(
            "too_many_steps",
            f"The model made {most} call{'s' if most != 1 else ''} without replying (STUDIO_MAX_MODEL_STEPS).",
        )

    def _step_call(self, step: int, request: ModelRequest) -> ModelReply:
        """One model call: within the turn's hold (after the first), with
        no database connection held while the model works."""
        self.control.check()
        if step > 1:
            self._hold_cover(request)
        provider = provider_for(self.agent.model)
        self.reply_deltas.step_start()
        return _storable_reply(self._model_call(provider, request))

    def _complete(self, reply: ModelReply, stop: "_MustStop | None" = None) -> SendResult:
        if reply.text is not None:
            self.entries.append(assistant_entry(reply.text))
        self.reply_deltas.finish(reply.text or "")
        return self._end(TurnStatus.COMPLETED, reply=reply.text or "", cut_short=stop)

    # --- tool calls, bounded ----------------------------------------------------------

    def _tool_calls(self, calls: list, step: int) -> None:
        """Run a step's tool calls in order, up to the most one step and one
        turn may run; past them, one error result says what was not run."""
        per_step = settings.STUDIO["MAX_TOOL_CALLS_PER_STEP"]
        per_turn = settings.STUDIO["MAX_TOOL_CALLS_PER_TURN"]
        room = min(per_step, per_turn - self.tool_calls_run)
        for call in calls[:room]:
            self._tool_call(call, step)
        if len(calls) <= room:
            return
        left = len(calls) - room
        if room < per_step:  # the turn's bound, not the step's
            said = (
                f"Not run: this turn has made {per_turn} tool calls, the most the studio runs in one turn; "
                f"this call and the {left - 1} after it were not run. Answer the player now."
            )
            self._tool_call(calls[room], step, refusal=said)
            raise _MustStop(
                "too_many_tool_calls",
                f"The model asked for more than {per_turn} tool calls in one turn (STUDIO_MAX_TOOL_CALLS_PER_TURN).",
            )
        said = (
            f"Not run: this step asked for {len(calls)} tool calls, and the studio runs at most {per_step} "
            f"in one step; the first {per_step} ran, this one and the {left - 1} after it did not. "
            "Make fewer calls at a time."
        )
        self._tool_call(calls[room], step, refusal=said)

    def _tool_call(self, call, step: int, *, refusal: str | None = None) -> None:
        """Run one tool call (or, with `refusal`, answer it with that error
        without running it) and record it with its fee — when the game still
        covers the fee and, after it, the turn's next model call. When it
        does not, the call is not run, and the turn must stop."""
        try:
            self._stepped(lambda: self._tool_call_record(call, step, refusal=refusal, fee_due=True))
        except ledger.NotCovered:
            self._stepped(lambda: self._tool_call_record(call, step, refusal=FEE_NOT_COVERED, fee_due=False))
            raise _MustStop(
                "budget_exhausted",
                f"The game could not cover the fee of the model's {call.name} call and the turn's reply "
                "after it (its balance less what running turns hold, or its monthly cap); the call was "
                "not run.",
            ) from None

    def _tool_call_record(self, call, step: int, *, refusal: str | None, fee_due: bool) -> None:
        """Inside the caller's transaction."""
        offered = call.name in self.context.tools
        is_game_tool = offered and call.name not in MEMORY_TOOLS
        # The memory-access fee is the spec's, for memory calls; a call of
        # the game's tools carries none.
        charged = offered and fee_due and not is_game_tool
        if refusal is None and is_game_tool:
            # Arguments the game could not read are the model's to fix: it
            # is told at once, and the game is not asked.
            refusal = arguments_refusal(call.name, call.arguments)
            if refusal is None:
                return self._game_tool_call(call, step)
        if refusal is not None:
            text, is_error = refusal, True
        elif offered:
            # The tool takes the store (agent row) lock before any charge
            # takes the account's: always agent first, then account.
            result = tool_run(
                agent=self.agent, name=call.name, arguments=call.arguments, turn_id=self.turn.uuid
            )
            text, is_error = result.text, result.is_error
        else:
            text, is_error = _not_offered(call.name, self.agent, self.turn), True
        if charged:
            self.bill.memory_access(self.fee)
        self._charge_unbilled()
        entry = tool_call_entry(
            id=self._call_id(call.id),
            step=step,
            name=call.name,
            arguments=call.arguments,
            result=text,
            is_error=is_error,
        )
        self._record(entry)
        # Last: the account row stays locked until the commit.
        self.bill.settle(must_cover=charged and bool(self.fee))
        if fee_due:
            self.tool_calls_run += 1
        publish_on_commit(
            self.agent.pk,
            event_types.tool_call(
                agent=self.agent.name,
                turn_id=str(self.turn.uuid),
                **tool_call_shown(entry, block=self.turn.block_number),
            ),
        )

    def _game_tool_call(self, call, step: int) -> None:
        """A call of a tool the game runs: recorded as waiting for the
        game's answer until its deadline (`tool.requested`), or, for a
        replay's copy, answered at once as the original game answered it.
        Inside the caller's transaction."""
        self._charge_unbilled()
        call_id = self._call_id(call.id)
        entry = tool_call_entry(
            id=call_id, step=step, name=call.name, arguments=call.arguments, result="", is_error=False
        )
        if self.answers is not None:
            entry.update(self.answers(call.name, call.arguments))
            self._record(entry)
            self.bill.settle()
            self.tool_calls_run += 1
            publish_on_commit(
                self.agent.pk,
                event_types.tool_call(
                    agent=self.agent.name,
                    turn_id=str(self.turn.uuid),
                    **tool_call_shown(entry, block=self.turn.block_number),
                ),
            )
            return
        seconds = tool_timeout(self.context.game_tools, call.name)
        deadline = timezone.now() + timedelta(seconds=seconds)
        entry.update(pending=True, deadline=deadline.isoformat(), timeoutSeconds=seconds)
        self._record(entry, call_id=call_id, deadline=deadline)
        self.bill.settle()
        self.tool_calls_run += 1
        # Long arguments are cut in the event as in every other; the
        # turn's pendingToolCalls carry them whole.
        shown = tool_call_shown(entry, block=self.turn.block_number)
        requested = event_types.tool_requested(
            agent=self.agent.name,
            turn_id=str(self.turn.uuid),
            call_id=call_id,
            name=call.name,
            arguments=shown["arguments"],
            deadline=deadline.isoformat(),
            cut=shown.get("cut"),
        )
        self.waiting.append((deadline, requested))

    def _call_id(self, given: str) -> str:
        """A call's id: the model's own when it is a short, printable one no
        other call of the turn has, else one made here — so each result is paired with
        its own call in the next request, and the game answers a call by it."""
        taken = {e.get("id") for e in self.entries if e["type"] == "tool_call"}
        usable = isinstance(given, str) and 0 < len(given) <= 64 and given.isascii() and given.isprintable()
        if usable and given not in taken:
            return given
        return f"call_{uuid.uuid4().hex[:16]}"

    # --- waiting for the game ---------------------------------------------------------

    def _wait(self, step: int, stop: "_MustStop | None") -> SendResult:
        """The step's game tool calls wait for the game: the turn is left,
        `waiting`, to no process — where its run stands kept on its row —
        until the game has answered them all or their deadlines pass
        (`agents.sending.waits`), when whoever sees it goes on with it."""
        state = {
            "step": step,
            "toolCallsRun": self.tool_calls_run,
            "checkpointId": self.context.checkpoint.pk if self.context.checkpoint else None,
            "price": _price_state(self.price),
            "fee": str(self.fee),
            "stop": [stop.code, stop.message] if stop else None,
        }
        earliest = min(deadline for deadline, _ in self.waiting)
        with transaction.atomic():
            waiting = Turn.objects.filter(
                pk=self.turn.pk, status=TurnStatus.RUNNING, cancel_requested=False
            ).update(status=TurnStatus.WAITING, run_state=state, lease_until=earliest)
            # Sent with the wait (a cancel that came first closes the calls it names).
            for _, requested in self.waiting:
                publish_on_commit(self.agent.pk, requested)
            # The game may have answered every call already (its answers
            # could not claim a turn still running): then it goes on now.
            answered = bool(waiting) and waits.claim_if_answered(self.turn)
            # A repeat of its send, waiting for it to end, answers with it waiting.
            wakeups.notify_on_commit(wakeups.turns_key(self.agent.pk))
        if not waiting:  # a cancel was asked for meanwhile (or it ended elsewhere)
            raise Cancelled()
        if answered:
            self.turn.status, self.turn.run_state = TurnStatus.RUNNING, state
            turn = self.turn
            transaction.on_commit(lambda: turn_resume(turn))
            return SendResult(self.turn)
        self.turn.status, self.turn.run_state, self.turn.lease_until = TurnStatus.WAITING, state, earliest
        _deadlines.add(self.turn.uuid, earliest)
        return SendResult(self.turn)

    # --- a turn that must stop --------------------------------------------------------

    def _wrap_up(self, stop: "_MustStop") -> SendResult:
        """The model is asked once more, with no tools offered, so the player
        still gets words — within what the turn holds and the game can
        still pay: its output limit is cut to fit, and with no room for a
        reply worth having no call is made and the turn fails."""
        request = self._request(tools=[], note=WRAP_UP_NOTE)
        request.max_output_tokens = self._wrap_up_output(request)
        if request.max_output_tokens < WRAP_UP_MIN_OUTPUT_TOKENS:
            return self._fail(stop.message, stop.code)
        self.control.check()
        provider = provider_for(self.agent.model)
        self.reply_deltas.step_start()
        reply = _storable_reply(self._model_call(provider, request))
        if not reply.text:  # (tool calls it made anyway were not offered: not run)
            return self._fail(f"{stop.message} Asked once more with no tools, it gave no reply.", stop.code)
        return self._complete(ModelReply(text=reply.text, usage=reply.usage), stop)

    def _wrap_up_output(self, request: ModelRequest) -> int:
        """The most output tokens a last call may ask for: what the turn
        holds (grown to the call's worst case where the game can pay) and
        the game still covers, less its input."""
        worst = ledger.hold_estimate(max_tokens=request.input_tokens, price=self.price)
        if worst > self.turn.held:
            self._hold_grow(worst - self.turn.held)
        room = ledger.turn_room(game_id=self.agent.game_id, turn_held=self.turn.held)
        left = room - ledger.usage_amount(Usage(input_tokens=request.input_tokens), self.price)
        most = settings.STUDIO["MODEL_MAX_OUTPUT_TOKENS"]
        if left < 0:
            return 0
        if self.price.output_per_mtok <= 0:
            return most
        return min(most, int(left * ledger.MILLION / self.price.output_per_mtok))

    def _model_call(self, provider, request: ModelRequest) -> ModelReply:
        self.call_tokens = request.input_tokens
        request.retry_within = self._retry_within(request)
        started = time.monotonic()
        self.control.hold_release()
        try:
            reply = provider.complete(request, self.control)
        except (ProviderError, Cancelled):
            raise
        except Exception as error:  # an answer the provider's adapter could not read
            log.warning("turn %s: the model's answer could not be read", self.turn.uuid, exc_info=True)
            raise ProviderError(
                f"the model's answer could not be read ({type(error).__name__})",
                reached=True,
                public=UNREADABLE,
            ) from error
        finally:
            self.control.hold_end()
            metrics.model_call_ended(self.agent.model.partition(":")[0], time.monotonic() - started)
        # Owed from here on, whatever the studio makes of the answer: the
        # step that records it charges it, or the turn's end does.
        self.unbilled = reply
        self.unbilled_attempts = list(reply.failed_attempts)
        metrics.model_tokens_used(reply.usage)
        return reply

    def _make_room(self) -> None:
        """A send that would pass maxTokens waits (bounded) for a compaction,
        renewing its lease and watching for a cancel meanwhile; a context
        still over maxTokens after it is never sent."""
        needed = self.context.total_tokens + self.new_tokens
        if needed <= self.agent.max_tokens:
            return
        if self.turn.is_transient:  # it leaves no trace: it folds nothing to make room
            raise TurnFailed(_transient_too_large(self.agent, needed), "context_too_large")
        started = time.monotonic()
        pending = compaction.compaction_request(agent=self.agent, reason=CompactionReason.THRESHOLD)
        pending = compaction.compaction_wait(self.agent, pending, on_wake=self.control.check)
        self.turn.compaction_wait_ms = int((time.monotonic() - started) * 1000)
        Turn.objects.filter(pk=self.turn.pk).update(compaction_wait_ms=self.turn.compaction_wait_ms)
        self.context = context_assemble(self.agent, transient=self.turn.is_transient)
        needed = self.context.total_tokens + self.new_tokens
        if needed <= self.agent.max_tokens:
            return
        if pending.awaits_credits:
            raise TurnFailed(
                f"The context would be {needed} tokens, over maxTokens {self.agent.max_tokens}, and the "
                "game cannot pay for the compaction that would make room; nothing was sent to the model.",
                "insufficient_credits",
            )
        why = (
            "the compaction that would make room did not finish in time"
            if pending.is_live
            else "even after a compaction"
        )
        raise TurnFailed(
            f"The context would be {needed} tokens, over maxTokens {self.agent.max_tokens}, and {why}; "
            "nothing was sent to the model.",
            "context_too_large",
        )

    def _retry_within(self, request: ModelRequest) -> Callable[[list[Usage]], bool]:
        """Whether the step's failed attempts, billed these, and one more
        attempt at its worst still fit in what the turn holds: the game
        covered the hold before the step, so a step that spends no more
        leaves the balance above zero and every other turn's hold covered."""
        worst = ledger.hold_estimate(max_tokens=request.input_tokens, price=self.price)

        def within(failed: list[Usage]) -> bool:
            billed = sum((ledger.usage_amount(usage, self.price) for usage in failed), Decimal(0))
            return billed + worst <= self.turn.held

        return within

    def _hold_cover(self, request: ModelRequest) -> None:
        """Before a model call after the first: the game must still cover
        what this call can cost. The turn's hold grows, in one statement
        that checks the balance (less every hold) and the monthly cap, when
        the context has outgrown it; otherwise the same check was made by
        the statement that charged the last step (its answer is kept on the
        bill), or is made now."""
        worst = ledger.hold_estimate(max_tokens=request.input_tokens, price=self.price)
        extra = max(worst - self.turn.held, 0)
        if extra:
            fits = self._hold_grow(extra)
        elif self.bill.covers_holds is not None:
            # Speed: a statement before each later model call; guarded by bench/send_overhead.py (statements per send).
            fits = self.bill.covers_holds
        else:
            fits = ledger.hold_fits(game_id=self.agent.game_id, amount=Decimal(0))
        if not fits:
            raise _MustStop(
                "budget_exhausted",
                "The game could not cover another model call in this turn (its balance less what running "
                "turns hold, or its monthly cap).",
            )

    def _hold_grow(self, extra: Decimal) -> bool:
        """Hold `extra` more for this turn, if the game can cover it."""
        with transaction.atomic():
            # The turn's row before the account, as everywhere.
            Turn.objects.filter(pk=self.turn.pk).update(held=F("held") + extra)
            fits = ledger.hold_fits(game_id=self.agent.game_id, amount=extra)
            if not fits:
                transaction.set_rollback(True)
        if fits:
            self.turn.held += extra
        return fits

    def _request(self, *, tools: list[str] | None = None, note: str = "") -> ModelRequest:
        """The next call's request: the context with the turn so far, the
        context's tools (or `tools`), the system prompt with `note` after it."""
        ctx = self.context
        tokens = ctx.total_tokens + self.new_tokens
        if tools is not None:
            tokens += tool_tokens(self.agent.model, tools) - ctx.tool_tokens
        if note:
            tokens += count_tokens(note)
        return ModelRequest(
            system=f"{ctx.system}\n\n{note}" if note else ctx.system,
            context_block=ctx.context_block,
            messages=ctx.messages + entries_to_messages(self.entries),
            tools=ctx.tools if tools is None else tools,
            input_tokens=tokens,
            on_text=self.reply_deltas.add,
            game_tools=ctx.game_tools if tools is None else [],
        )

    @contextmanager
    def _step(self):
        """One transaction of the run. If it fails, what it did to the run's
        own state (entries, the unbilled step, the bill) is undone too (the
        bill read again from the database — once it answers, should it be
        what failed). The database failing as the transaction commits
        raises CommitUnknown: whether it committed cannot be known."""
        if self.bill_stale:
            self.bill.reload()
            self.bill_stale = False
        kept = (len(self.entries), self.new_tokens, self.unbilled, self.unbilled_attempts)
        counts = (len(self.waiting), self.tool_calls_run)
        committing = False
        try:
            with transaction.atomic():
                yield
                committing = True
        except BaseException as error:
            del self.entries[kept[0] :]
            self.new_tokens, self.unbilled, self.unbilled_attempts = kept[1], kept[2], kept[3]
            del self.waiting[counts[0] :]
            self.tool_calls_run = counts[1]
            self.bill_stale = True
            with suppress(*DATABASE_DOWN):
                self.bill.reload()
                self.bill_stale = False
            if committing and isinstance(error, DATABASE_DOWN):
                raise CommitUnknown() from error
            raise
        self.stored_entries = len(self.entries)

    def _stepped(self, work: Callable):
        """`work()` in one step (`_step`), done again once the database
        answers should it be unreachable before the step commits: what the
        failed attempt did was rolled back and undone, so it is done once."""
        while True:
            try:
                with self._step():
                    return work()
            except CommitUnknown:
                raise
            except DATABASE_DOWN:
                self.control.database_wait()

    def owed(self) -> tuple | None:
        """(price, usages) of the model calls the provider billed that no
        committed step has charged yet; None when there are none."""
        usages = [*self.unbilled_attempts, *([self.unbilled.usage] if self.unbilled is not None else [])]
        return (self.price, usages) if usages else None

    def _charge_unbilled(self) -> None:
        """Charge the last model step, inside the caller's transaction."""
        for usage in self.unbilled_attempts:  # attempts a retry followed, each billed
            self.bill.model_usage(self.price, usage)
        self.unbilled_attempts = []
        if self.unbilled is not None:
            self.bill.model_usage(self.price, self.unbilled.usage)
            self.unbilled = None

    def _record(self, entry: dict, *, call_id: str = "", deadline=None) -> None:
        """Keep `entry` in the block (inside the caller's transaction); with
        a `deadline`, a call waiting for the game's answer by `call_id`."""
        self.entries.append(entry)
        self.new_tokens += sum(count_message_tokens(m) for m in entries_to_messages([entry]))
        if not self.turn.is_transient:
            # The entry alone: rewriting the block's whole entries on every
            # call would write each turn's calls over and over.
            # Speed: ORM statement building (studio/runtime/sql.py); guarded by bench/agent_server.py (server CPU per message).
            sql.insert(
                TurnEntry(
                    turn_id=self.turn.pk,
                    position=len(self.entries) - 1,
                    entry=entry,
                    call_id=call_id,
                    deadline=deadline,
                    waiting=deadline is not None,
                )
            )

    def _fail(self, error: str, code: str, *, error_class: str = "") -> SendResult:
        return self._end(TurnStatus.FAILED, error=error, code=code, error_class=error_class)

    def _end(
        self,
        status: str,
        *,
        reply: str = "",
        error: str = "",
        code: str = "",
        error_class: str = "",
        cut_short: "_MustStop | None" = None,
    ) -> SendResult:
        try:
            ending = self._finish(
                status,
                reply=reply,
                error=error,
                code=code,
                error_class=error_class,
                cut_short=(cut_short.code, cut_short.message) if cut_short else None,
            )
        except DataError:
            # What this step said could not be stored: end with what was.
            log.warning("turn %s: the database refused its ending", self.turn.uuid, exc_info=True)
            del self.entries[self.stored_entries :]
            ending = self._finish(
                TurnStatus.FAILED,
                error="The studio could not store what the model sent in this step.",
                code="unstorable_output",
            )
        if not self.turn.is_transient:
            if ending.cost is not None:
                verbatim_extend(
                    self.agent,
                    self.context.checkpoint,
                    self.turn.block_number,
                    self.entries,
                    ending.block_tokens,
                )
            compaction.compaction_after_turn(
                agent=self.agent,
                status=self.turn.status,
                block_number=self.turn.block_number,
                context_tokens=self.context.total_tokens + ending.block_tokens,
                verbatim_tokens=self.context.message_tokens + ending.block_tokens,
                checkpoint=self.context.checkpoint,
            )
        if self.abandoned is not None:
            self._settle_when_ended(self.abandoned, is_flagged=ending.call_open)
        if ending.cost is None:
            return SendResult(self.turn)
        return SendResult(self.turn, ending.cost, self.entries)

    def _finish(self, status: str, **ending) -> turn_slot.Ending:
        open_call = self.call_tokens if self.abandoned is not None else None

        def finish():
            self._charge_unbilled()
            return turn_slot.turn_finish(
                self.turn,
                status,
                entries=self.entries,
                recorded=self.stored_entries > 1,
                bill=self.bill,
                context=self.context,
                open_call=open_call,
                **ending,
            )

        return self._stepped(finish)

    def _billed(self, end: CallEnd) -> Usage | None:
        """What the provider bills for a call that ended so: the usage it
        reported; else, if it took the request, the input tokens sent (at
        the input price) and the output that came; else nothing."""
        if end.usage is not None:
            return end.usage
        if end.reached:
            return Usage(input_tokens=self.call_tokens, output_tokens=count_tokens(end.text))
        return None

    def _settle_when_ended(self, call: AbandonedCall, *, is_flagged: bool) -> None:
        """Charge the call the turn stopped waiting for once it ends, and
        give the turn's hold back then (`is_flagged`: the turn's ending
        left the hold for it; otherwise it was ended elsewhere, and only
        the charge is owed)."""
        here = threading.current_thread()
        turn, agent, price = self.turn, self.agent, self.price

        def settle(end: CallEnd) -> None:
            try:
                usage = usage_total(self._billed(end), end.failed_attempts)
                if usage is not None:
                    metrics.model_tokens_used(usage)
                with logs.work_context(game=_game_label(agent), agent=agent.name, turn=turn.uuid):
                    turn_slot.turn_call_settle(
                        turn, agent=agent, price=price, usage=usage, is_flagged=is_flagged
                    )
            except Exception:  # its lease lapses, and the next reap settles it
                log.warning(
                    "turn %s: its abandoned model call could not be charged", turn.uuid, exc_info=True
                )
            finally:
                if threading.current_thread() is not here:
                    connection.close()

        if lifecycle.is_past_grace():
            settle(call.end_now())  # the process exits now: what it sent is what is owed
        else:
            call.when_ended(settle)


def model_error_text(error: ProviderError, turn: Turn) -> str:
    """A failed model call, as the game and its designers are told: its
    class (`causes`), what it means and who can fix it, and the provider's
    words with the operator's secrets and addresses taken out. The whole
    message goes to the log, with the turn's id."""
    log.warning("turn %s: the model call failed: %s", turn.uuid, error)
    if not error.cause:
        if error.public == str(error):  # nothing held back
            return f"The model call failed: {error.public}"
        return (
            f"The model call failed: {error.public}. The studio's operators can find the details in its "
            f"logs under turn {turn.uuid}."
        )
    text = f"The model call failed: {error.public}. {causes.advice(error.cause)}"
    if error.said:
        text += f" The provider said: “{error.said}”"
    return f"{text} (The studio's logs have the whole message under turn {turn.uuid}.)"


# The longest tool name or call id a model's call keeps. The providers allow
# 64 characters and a game's tools have at most that: a longer one names no
# tool, and is kept cut (a name) or replaced (an id), so one call cannot
# store and repeat megabytes of it.
CALL_NAME_MOST = 128


def _storable_reply(reply: ModelReply) -> ModelReply:
    """What a model sent, with the characters the database refuses replaced,
    and its calls' names and ids as bounded text."""
    if reply.text:
        reply.text = storable(reply.text)
    for call in reply.tool_calls:
        call.name = storable(_call_name(call.name))
        if not isinstance(call.id, str) or len(call.id) > CALL_NAME_MOST:
            call.id = ""  # one is made for it where it is recorded
        call.arguments = storable_json(call.arguments)
    return reply


def _call_name(name) -> str:
    """A call's tool name as text of at most CALL_NAME_MOST characters."""
    name = name if isinstance(name, str) else "" if name is None else str(name)
    return name if len(name) <= CALL_NAME_MOST else name[: CALL_NAME_MOST - 1] + "…"


def _not_offered(name: str, agent: Agent, turn: Turn) -> str:
    if name in MEMORY_TOOLS and turn.is_transient:
        return "Memory tools are not offered on a transient send."
    if name in MEMORY_TOOLS:
        return "Memory is off for this agent: it has no memory tools."
    if turn.is_transient and any(tool["name"] == name for tool in agent.tools or ()):
        return "The game's tools are not offered on a transient send."
    return f"There is no tool named '{name}'."
