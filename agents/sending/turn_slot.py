"""The turn slot: one turn per agent at a time, in arrival order, across
any number of processes — and the credits each live turn holds.

A send is queued as a `Turn` row (its id orders the agent's sends), holding
what its first model call can cost, and starts when no earlier send of its
agent is live — decided under the agent row's lock in a short transaction.
A queued send waits holding no database connection (`studio.runtime.wakeups`),
woken when one of the agent's turns ends. A live turn holds a lease its
process renews; a turn whose lease lapsed, or that has lived past
TURN_DEADLINE_SECONDS, is dead, and is ended (its hold given back) by the
agent's next send, by a send of its game about to be refused for credits,
or when its agent is deleted. A live turn ends in `turn_finish`, the one
place its hold goes back.

Lock order: a transaction that locks more than one of the agent's row, a
turn's row and the game's account locks them in that order — agent, turn,
account — so no two can deadlock. A send's start (the agent, the dead
turns it ends, its hold), a tool call (the store under the agent's row,
then its fee), a turn's end (the turn, then the hold it gives back) and a
cancel (agent, turn, account) all keep it.
"""

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import NoReturn

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from agents import compaction
from agents.models import (
    LIVE_STATUSES,
    Agent,
    Block,
    Checkpoint,
    Compaction,
    CompactionStatus,
    Turn,
    TurnEntry,
    TurnStatus,
    entries_so_far,
)
from agents.providers.base import Usage
from agents.sending import waits
from agents.sending.context import Context, Start, entries_tokens, fixed_tokens, user_entry
from agents.wire import turn_cost, turn_wire
from billing import ledger, refusals
from studio.errors import Conflict, DomainError, NotFound, PaymentRequired, Unavailable
from studio.live import event_types
from studio.live.events import publish_on_commit
from studio.ops import metrics
from studio.runtime import sql, wakeups
from studio.serving import lifecycle

log = logging.getLogger(__name__)

IDEMPOTENCY_WINDOW = timedelta(hours=24)
# Requests that may wait on one turn at once (repeats of its send); more are
# told where to follow it instead (`FollowElsewhere`).
FOLLOWERS_PER_TURN = 4
# The longest a follower goes without looking at its turn, woken or not: a
# wake-up comes when a turn of the agent ends; this is for one that is lost.
FOLLOW_LOOK_SECONDS = 15.0


def lease() -> timezone.datetime:
    return timezone.now() + timedelta(seconds=settings.STUDIO["TURN_LEASE_SECONDS"])


def lease_renew(turn: Turn) -> bool:
    """Renew a running turn's lease, in the statement that reads whether it
    may go on: False when a cancel was asked for, or it no longer runs
    (ended elsewhere)."""
    return turn.pk in leases_renew([turn.pk])


def leases_renew(turn_ids: list[int]) -> set[int]:
    """Renew the leases of those of `turn_ids` still running, in one
    statement; the ids of those that may go on (no cancel asked for)."""
    # Speed: a statement (the row's read) and the ORM's building of two; guarded by bench/players.py (server CPU per send).
    quote, field = connection.ops.quote_name, Turn._meta.get_field("lease_until")
    ran = sql.run(
        f"UPDATE {quote(Turn._meta.db_table)} SET {quote(field.column)} = %s WHERE {quote('id')} IN "
        f"({', '.join(['%s'] * len(turn_ids))}) AND {quote('status')} = %s "
        f"RETURNING {quote('id')}, {quote('cancel_requested')}",
        [field.get_db_prep_save(lease(), connection), *turn_ids, TurnStatus.RUNNING],
    )
    return {turn_id for turn_id, cancel_requested in ran.rows if not cancel_requested}


class SendRequest:
    """A send as the client made it; `digest` tells a true repeat from
    another message under the same Idempotency-Key. `follows`: a repeat of
    it would wait for the earlier turn to end (a plain send; one that
    answers at once, or streams, waits on nothing)."""

    def __init__(
        self,
        content: str,
        transient: bool,
        idempotency_key: str | None,
        new_tokens: int,
        follows: bool = True,
    ):
        self.content, self.transient, self.idempotency_key = content, transient, idempotency_key
        self.new_tokens, self.follows = new_tokens, follows  # the message's tokens
        body = json.dumps({"content": content, "transient": transient}, sort_keys=True)
        self.digest = hashlib.sha256(body.encode()).hexdigest() if idempotency_key else ""


# --- queueing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Enqueued:
    """A queued send: its turn, whether it is new (not a repeat under an
    Idempotency-Key), the rates it is charged at, and — when it started at
    once — what its start read. A repeat that is to wait for the earlier
    turn has joined its followers (`following`)."""

    turn: Turn
    is_new: bool
    rates: ledger.Rates | None = None
    start: Start | None = None
    following: bool = False


def turn_enqueue(agent: Agent, request: SendRequest) -> Enqueued:
    """Queue the send (`_enqueue_again`). A send refused for money leaves a
    trace, counted once its transaction has rolled back (billing.refusals)."""
    try:
        return _enqueue_again(agent, request)
    except PaymentRequired as refusal:
        refusals.refusal_record(game_id=agent.game_id, agent_name=agent.name, refusal=refusal)
        raise


def _enqueue_again(agent: Agent, request: SendRequest) -> Enqueued:
    """Queue the send (`_enqueue`). Refused for want of credits, or past the
    game's live turns, it first ends the game's dead turns and settles the
    calls their processes left (their holds and places may be what is
    missing), and tries once more. An agent whose compaction waits for
    credits takes no send until that compaction can go on."""
    try:
        return _enqueue(agent, request)
    except compaction.CompactionAwaitsCredits:
        if not compaction.compaction_resume(agent):
            raise
    except (PaymentRequired, ledger.GameBusy):
        if not turns_reap(game_id=agent.game_id):
            raise
    return _enqueue(agent, request)


def _enqueue(agent: Agent, request: SendRequest) -> Enqueued:
    """Queue the send, holding what its first model call can cost, and
    start it if no other send of its agent is live; or, for a repeat under
    an Idempotency-Key, the earlier turn."""
    with transaction.atomic():
        # A message takes the agent's next block number as it locks the row
        # (one statement, which reads the send's rates with it), and gives
        # it back in the rare case it must queue.
        take_block = not request.transient and not request.idempotency_key
        block_number, rates = _agent_lock(agent, take_block=take_block)
        if request.idempotency_key:
            earlier = _turn_by_key(agent, request)
            if earlier is not None:
                following = request.follows and not earlier.has_ended and _follower_join(agent, earlier)
                return Enqueued(earlier, False, following=following)
            if not request.transient:
                block_number = _block_take(agent)
        held = ledger.hold_estimate(max_tokens=agent.max_tokens, price=rates.price)
        # Speed: a SELECT per send (the agent's reads ride in the hold, `also`); guarded by bench/send_overhead.py (statements per send).
        now = _AgentNow(
            *ledger.hold_take(game=agent.game, amount=held, also=_AgentNow.sql(agent), agent=agent.name)
        )
        if now.compaction_awaits:
            raise compaction.CompactionAwaitsCredits(
                f"Agent '{agent.name}' has a compaction waiting for credits: the game cannot pay for its "
                f"model call, and the agent takes no send until it can. {ledger.OPERATORS} can add credits."
            )
        _fits_check(agent, request, now.checkpoint_tokens or 0)
        turn = Turn(
            agent=agent,
            is_transient=request.transient,
            lease_until=lease(),
            held=held,
            idempotency_key=request.idempotency_key,
            request_digest=request.digest,
        )
        if not now.has_live:
            _start(agent, turn, request.content, block_number)
            return Enqueued(turn, True, rates, Start(now.checkpoint_id, turn.block_number))
        # Behind a live send — or a dead one, which `turn_wait` ends.
        _queue_room_check(agent)
        if block_number is not None:
            _block_take(agent, -1)
        turn.save()
    return Enqueued(turn, True, rates)


@dataclass(frozen=True)
class _AgentNow:
    """What a send reads of its agent with its hold, after the agent's lock
    (so nothing committed before the lock is missed): the checkpoint in
    force, its context block's tokens, whether a send is live, and whether
    a compaction waits for credits."""

    checkpoint_id: int | None
    checkpoint_tokens: int | None
    has_live: bool
    compaction_awaits: bool

    @staticmethod
    def sql(agent: Agent) -> tuple[str, list]:
        newest = f"FROM {Checkpoint._meta.db_table} WHERE agent_id = %s ORDER BY id DESC LIMIT 1"
        statuses = ", ".join(["%s"] * len(LIVE_STATUSES))
        live = f"EXISTS (SELECT 1 FROM {Turn._meta.db_table} WHERE agent_id = %s AND status IN ({statuses}))"
        awaits = (
            f"EXISTS (SELECT 1 FROM {Compaction._meta.db_table} "
            "WHERE agent_id = %s AND status = %s AND awaits_credits)"
        )
        sql = f"(SELECT id {newest}), (SELECT block_tokens {newest}), {live}, {awaits}"
        return sql, [agent.pk, agent.pk, agent.pk, *LIVE_STATUSES, agent.pk, CompactionStatus.QUEUED]


def _agent_lock(agent: Agent, *, take_block: bool) -> tuple[int | None, ledger.Rates]:
    """Lock the agent's row — taking its next block number as it does, with
    `take_block` — and read the send's rates in the same statement. Returns
    (block number or None, rates)."""
    # Speed: 2 statements per send (block number, rates read with the lock); guarded by bench/send_overhead.py (statements per send).
    rates, params = ledger.rates_sql(agent.model)
    table = Agent._meta.db_table
    if take_block:
        statement = (
            f"UPDATE {table} SET last_block = last_block + 1 WHERE id = %s RETURNING last_block, {rates}"
        )
        params = [agent.pk, *params]
    else:
        lock = connection.ops.for_update_sql() if connection.features.has_select_for_update else ""
        statement = f"SELECT NULL, {rates} FROM {table} WHERE id = %s {lock}"
        params = [*params, agent.pk]
    row = sql.one(statement, params)
    if row is None:
        raise _gone(agent)
    if take_block:
        agent.last_block = row[0]
    return row[0], ledger.rates_read(agent.model, row[1], row[2])


def _fits_check(agent: Agent, request: SendRequest, checkpoint_tokens: int) -> None:
    """413 when the message could never fit: with the system prompt, the
    tools offered and the checkpoint's context block (which no compaction
    empties) the context is already over maxTokens, so no compaction could
    make room for it."""
    fixed = fixed_tokens(agent, transient=request.transient) + checkpoint_tokens
    floor = fixed + request.new_tokens
    if floor > agent.max_tokens:
        raise DomainError(
            f"This message is {request.new_tokens} tokens; with the system prompt, the tools and the "
            f"checkpoint's context block ({fixed} together) the context would be {floor} tokens, "
            f"over maxTokens {agent.max_tokens}, and no compaction can make that room. Send a "
            "shorter message, or raise compaction.maxTokens.",
            status=413,
            code="context_too_large",
        )


def _turn_by_key(agent: Agent, request: SendRequest) -> Turn | None:
    """The turn an earlier send made under this Idempotency-Key (within the
    window), or None. Under the agent row's lock, so two repeats arriving at
    once cannot both start a turn."""
    turn = Turn.objects.filter(agent=agent, idempotency_key=request.idempotency_key).first()
    if turn is None:
        return None
    if turn.created_at < timezone.now() - IDEMPOTENCY_WINDOW:
        Turn.objects.filter(pk=turn.pk).update(idempotency_key=None)  # the key is free again
        return None
    if turn.request_digest != request.digest:
        raise DomainError(
            f"The Idempotency-Key '{request.idempotency_key[:80]}' was used for a different message "
            f"to agent '{agent.name}' (turn {turn.uuid}). Use a new key for each new message.",
            status=422,
            code="idempotency_mismatch",
        )
    return turn


def _queue_room_check(agent: Agent) -> None:
    """429 when the agent already has MAX_QUEUED_SENDS requests waiting —
    queued sends, and repeats following a live turn: one game cannot pile
    up waiting requests without bound."""
    if _waiting(agent) >= settings.STUDIO["MAX_QUEUED_SENDS"]:
        raise _queue_full(agent)


def _waiting(agent: Agent) -> int:
    """The agent's queued sends and the requests following its live turns."""
    counts = Turn.objects.filter(agent=agent, status__in=LIVE_STATUSES).aggregate(
        queued=Count("id", filter=Q(status=TurnStatus.QUEUED)), following=Sum("followers")
    )
    return counts["queued"] + (counts["following"] or 0)


def _queue_full(agent: Agent) -> DomainError:
    return DomainError(
        f"Agent '{agent.name}' already has {settings.STUDIO['MAX_QUEUED_SENDS']} requests waiting (sends queued behind "
        "its running turn, and repeats waiting on a turn); wait for some to end, then send again.",
        status=429,
        code="agent_busy",
    )


class FollowElsewhere(Exception):
    """FOLLOWERS_PER_TURN requests already wait on the turn a repeat would
    follow: it is answered at once with where to follow it."""

    def __init__(self, turn: Turn):
        super().__init__(f"turn {turn.uuid} has {FOLLOWERS_PER_TURN} followers")
        self.turn = turn


def _follower_join(agent: Agent, turn: Turn) -> bool:
    """Count a repeat among the live `turn`'s followers, within the turn's
    and the agent's limits (FollowElsewhere, 429 `agent_busy`). Under the
    agent row's lock."""
    if turn.followers >= FOLLOWERS_PER_TURN:
        raise FollowElsewhere(turn)
    if _waiting(agent) >= settings.STUDIO["MAX_QUEUED_SENDS"]:
        raise _queue_full(agent)
    Turn.objects.filter(pk=turn.pk).update(followers=F("followers") + 1)
    return True


def _follower_leave(turn: Turn) -> None:
    Turn.objects.filter(pk=turn.pk, followers__gt=0).update(followers=F("followers") - 1)


def _block_take(agent: Agent, step: int = 1) -> int:
    """Move the agent's last block number by `step` (1: take the next one;
    -1: give it back) and return it. Locks the agent row."""
    row = sql.one(
        f"UPDATE {Agent._meta.db_table} SET last_block = last_block + %s WHERE id = %s RETURNING last_block",
        [step, agent.pk],
    )
    if row is None:
        raise _gone(agent)
    agent.last_block = row[0]
    return agent.last_block


def _gone(agent: Agent) -> NotFound:
    return NotFound(f"Agent '{agent.name}' was deleted before this send could start.", code="agent_not_found")


# --- waiting -----------------------------------------------------------------------


def turn_wait(turn: Turn, content: str) -> Turn:
    """Wait for the agent's earlier sends to end, then start `turn`. Woken
    when one of the agent's turns ends; holds no connection meanwhile, and
    renews the turn's lease each time it looks."""
    seconds = settings.STUDIO["SEND_WAIT_SECONDS"]
    give_up = time.monotonic() + seconds
    metrics.send_queued()
    try:
        with wakeups.listening(wakeups.turns_key(turn.agent_id)) as waiter:
            while True:
                if lifecycle.is_past_grace():  # its process stops: it starts nothing now
                    _wait_give_up(
                        turn, "Its process stopped before it started.", "shutdown", _shutdown_refusal()
                    )
                if _turn_try_start(turn, content):
                    break
                left = give_up - time.monotonic()
                if left <= 0:
                    _wait_give_up(
                        turn,
                        "It waited too long for the agent's earlier sends.",
                        "busy",
                        _busy_refusal(seconds),
                    )
                waiter.wait(left)
    finally:
        metrics.send_dequeued()
    return turn


def _shutdown_refusal() -> Unavailable:
    return Unavailable(
        "This studio process is restarting and the send had not started; send it again (the same "
        "Idempotency-Key is safe: nothing ran).",
        code="shutting_down",
    )


def _busy_refusal(seconds: int) -> Unavailable:
    return Unavailable(
        f"The agent is still busy with earlier sends after {seconds} s; try again later.",
        code="agent_busy",
        retry_after=5,
    )


def _wait_give_up(turn: Turn, error: str, code: str, refusal: Unavailable) -> NoReturn:
    """End a queued send that never started, and refuse it with `refusal`."""
    turn_finish(turn, TurnStatus.FAILED, error=error, code=code)
    # It never ran: a retry under its Idempotency-Key runs afresh.
    Turn.objects.filter(pk=turn.pk).update(idempotency_key=None)
    raise refusal


def _turn_try_start(turn: Turn, content: str) -> bool:
    """Start queued `turn` if no earlier send of its agent is live. True
    when it started or has ended (a cancel)."""
    now = timezone.now()
    ahead = Turn.objects.filter(agent_id=turn.agent_id, status__in=LIVE_STATUSES, id__lt=turn.id).only(
        "status", "lease_until", "created_at", "run_state"
    )
    if ahead and not any(_death(t, now) or _stalled(t, now) for t in ahead):
        if Turn.objects.filter(pk=turn.pk, status=TurnStatus.QUEUED).update(lease_until=lease()):
            return False
    try:
        with transaction.atomic():
            agent = Agent.objects.select_for_update().get(pk=turn.agent_id)
            turn.refresh_from_db()
            if turn.has_ended:
                return True
            head = live_head(agent, turn)
            if head is not None and head.pk != turn.pk:
                return False
            return _start(agent, turn, content) or turn.has_ended
    except (Agent.DoesNotExist, Turn.DoesNotExist):
        raise NotFound("The agent was deleted while this send waited.", code="agent_not_found") from None


def turn_follow(turn: Turn, *, following: bool) -> Turn:
    """Wait for an earlier send's turn (a repeat under its Idempotency-Key,
    among its followers when `following`) to end, and return it. It looks
    at the turn when one of the agent's turns ends (or, a wake-up lost,
    every FOLLOW_LOOK_SECONDS), holding no database connection between. A
    turn whose process died meanwhile is ended here."""
    try:
        with wakeups.listening(wakeups.turns_key(turn.agent_id)) as waiter:
            while True:
                # Looked at after listening: an end committed meanwhile still wakes it.
                try:
                    turn.refresh_from_db()
                except Turn.DoesNotExist:
                    raise NotFound(
                        "The agent was deleted while this send waited.", code="agent_not_found"
                    ) from None
                if turn.has_ended or turn.status == TurnStatus.WAITING or not following:
                    return turn  # a waiting turn goes on when the game answers it
                if _death(turn, timezone.now()) or _stalled(turn, timezone.now()):
                    turns_end_dead(agent_id=turn.agent_id)
                    continue
                waiter.wait(FOLLOW_LOOK_SECONDS, longest=FOLLOW_LOOK_SECONDS)
    finally:
        if following:
            _follower_leave(turn)


# --- the slot --------------------------------------------------------------------------


def _death(turn: Turn, now) -> tuple[str, str] | None:
    """(code, error) when a live turn can be taken as dead: its process
    stopped renewing its lease, or it has outlived the turn deadline. A
    turn waiting for the game runs in no process: only the deadline ends it
    (its lease is when its earliest call's deadline passes) — and so does
    one the game's last answer claimed whose process stopped before going
    on with it (`_stalled`): it is gone on with again instead. The deadline
    is said first: a turn past it is ended for that, whatever its lease."""
    deadline = settings.STUDIO["TURN_DEADLINE_SECONDS"]
    if turn.created_at and turn.created_at + timedelta(seconds=deadline) < now:
        return "deadline", f"The turn did not end within {deadline} s (STUDIO_TURN_DEADLINE_SECONDS)."
    lapsed = turn.lease_until and turn.lease_until < now
    if turn.status != TurnStatus.WAITING and lapsed and turn.run_state is None:
        return "process_stopped", "The process running this turn stopped before it ended."
    return None


def _stalled(turn: Turn, now) -> bool:
    """A turn the game's last answer claimed (`running` again, where it
    waited still kept: `run_state`) whose process stopped before going on
    with it: nothing of its next step ran, so it can be gone on with."""
    lapsed = turn.lease_until is not None and turn.lease_until < now
    return turn.status == TurnStatus.RUNNING and turn.run_state is not None and lapsed


def live_head(agent: Agent, turn: Turn | None = None) -> Turn | None:
    """The agent's oldest live send, other than dead ones, which are ended
    on the way (giving their holds back); a stalled one (`_stalled`) is
    made `waiting` again, answered, for the sweep to go on with
    (`waits.waits_expire`). `turn`, the caller's own, is never taken as
    dead. Call under the agent row's lock."""
    now = timezone.now()
    head = None
    for live in Turn.objects.filter(agent=agent, status__in=LIVE_STATUSES).order_by("id"):
        mine = turn is not None and live.pk == turn.pk
        death = None if mine else _death(live, now)
        if death:
            live.agent = agent
            turn_finish(live, TurnStatus.FAILED, error=death[1], code=death[0])
            log.warning("turn %s ended failed (%s): %s", live.uuid, death[0], death[1])
            continue
        if not mine and _stalled(live, now):
            _stalled_return(live, now)
        if head is None:
            head = live
    return head


def _stalled_return(turn: Turn, now) -> None:
    """Make a stalled turn `waiting` again — in the statement that checks
    it is still stalled — with every call answered: the next sweep claims
    it and goes on with it, as with any turn whose calls are answered."""
    back = Turn.objects.filter(
        pk=turn.pk, status=TurnStatus.RUNNING, run_state__isnull=False, lease_until__lt=now
    ).update(status=TurnStatus.WAITING, lease_until=now)
    if back:
        turn.status, turn.lease_until = TurnStatus.WAITING, now
        log.warning(
            "turn %s: its process stopped before going on after the game's answers; the sweep goes on with it",
            turn.uuid,
        )


def turns_end_dead(*, agent_id: int) -> None:
    with transaction.atomic():
        agent = Agent.objects.select_for_update().filter(pk=agent_id).first()
        if agent is not None:
            live_head(agent)


def turns_reap(*, game_id: int | None = None) -> bool:
    """End the dead live turns — an idle agent's dead turn would otherwise
    keep its hold for good — settle the open calls of turns whose process
    died, and hand out again compactions whose worker died: the game's
    (when a send of it is refused), or every game's (the periodic sweep,
    `agents.sweep`). True when there were any."""
    now = timezone.now()
    deadline = now - timedelta(seconds=settings.STUDIO["TURN_DEADLINE_SECONDS"])
    dead = Turn.objects.filter(status__in=LIVE_STATUSES).filter(
        Q(lease_until__lt=now) | Q(created_at__lt=deadline)
    )
    if game_id is not None:
        dead = dead.filter(agent__game_id=game_id)
    agents = set(dead.values_list("agent_id", flat=True))
    for agent_id in agents:
        turns_end_dead(agent_id=agent_id)
    settled = open_calls_settle(game_id=game_id)
    return compaction.compactions_reap(game_id=game_id) or settled or bool(agents)


def _start(agent: Agent, turn: Turn, content: str, block_number: int | None = None) -> bool:
    """Make `turn` the running one (saving it, new or queued); a
    non-transient turn takes the next block number (or the one it has
    already taken, `block_number`), its block starting with the player's
    message. Under the agent row's lock. False when a queued turn has ended
    meanwhile: it is not started."""
    turn.status = TurnStatus.RUNNING
    turn.started_at = timezone.now()
    turn.lease_until = lease()
    if not turn.is_transient:
        turn.block_number = block_number if block_number is not None else _block_take(agent)
    if turn.pk is None:
        # Speed: ORM statement building (studio/runtime/sql.py); guarded by bench/agent_server.py (server CPU per message).
        sql.insert(turn)  # with the block below, what every send writes first
    elif not Turn.objects.filter(pk=turn.pk, status=TurnStatus.QUEUED).update(
        status=turn.status,
        started_at=turn.started_at,
        lease_until=turn.lease_until,
        block_number=turn.block_number,
    ):
        if not turn.is_transient:
            _block_take(agent, -1)
        turn.refresh_from_db()
        return False
    if not turn.is_transient:
        # Speed: ORM statement building (studio/runtime/sql.py); guarded by bench/agent_server.py (server CPU per message).
        sql.insert(Block(agent=agent, number=turn.block_number, turn=turn, entries=[user_entry(content)]))
    publish_on_commit(
        agent.pk,
        event_types.turn_started(
            agent=agent.name, turn_id=str(turn.uuid), block=turn.block_number, transient=turn.is_transient
        ),
    )
    return True


# --- ending ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Ending:
    """What ending a turn made: its block's tokens, its cost as its
    `turn.finished` event carries it (None when the turn had already been
    ended elsewhere), and whether its hold was left for a model call still
    open (`turn_call_settle` gives it back)."""

    block_tokens: int
    cost: dict | None
    call_open: bool = False


def turn_finish(
    turn: Turn,
    status: str,
    *,
    reply: str = "",
    error: str = "",
    code: str = "",
    error_class: str = "",
    entries: list | None = None,
    recorded: bool = True,
    cut_short: tuple[str, str] | None = None,
    bill: ledger.TurnBill | None = None,
    context: Context | None = None,
    open_call: int | None = None,
) -> Ending:
    """End a live turn and its block. `entries`: the block's, whole (None:
    what the block and its turn's recorded entries hold); `recorded`:
    whether the run recorded entries of its own (`TurnEntry`), which go
    once the block has them. `cut_short`: (code, why) of a turn that
    completes cut short; `error_class`: a failed model call's class
    (`agents.providers.causes`). `bill`: the running turn's charges,
    settled here with its hold (without one, the turn's lines are read for
    its `turn.finished` event). `context`: what its first model call was
    given, recorded with the block. `open_call`: the input tokens of a model
    call the turn stopped waiting for — the provider bills it, so the hold
    stays until `turn_call_settle` charges it."""
    now = timezone.now()
    with transaction.atomic(savepoint=False):
        # The two statements every turn ends with.
        # Speed: ORM statement building (studio/runtime/sql.py); guarded by bench/agent_server.py (server CPU per message).
        updated = sql.update(
            Turn,
            {"pk": turn.pk, "status__in": LIVE_STATUSES},
            {
                "status": status,
                "reply": reply if turn.is_transient else "",  # a played turn's: its block's
                "error": error,
                "error_code": code,
                "error_class": error_class,
                "cut_short_code": cut_short[0] if cut_short else "",
                "cut_short": cut_short[1] if cut_short else "",
                "ended_at": now,
                "lease_until": None if open_call is None else now + _open_call_lease(),
                "open_call_tokens": open_call,
            },
        )
        if not updated:
            # Ended elsewhere meanwhile (its hold went back then); what the
            # run owes is still owed.
            if bill is not None:
                bill.settle()
            turn.refresh_from_db()
            return Ending(block_tokens=0, cost=None)
        block_fields = {"status": status, "tokens": 0}
        if context is not None:
            checkpoint = context.checkpoint.pk if context.checkpoint else None
            block_fields.update(revision=context.revision, checkpoint_id=checkpoint)
        if entries is None:
            waits.waiting_calls_close(turn)  # a waiting turn ended: its calls get no answer now
            block = Block.objects.filter(turn=turn).only("entries").first()
            entries = list(block.entries) if block is not None else []
            entries += entries_so_far([turn.pk]).get(turn.pk, [])
        elif any(entry.get("pending") for entry in entries):
            # Ended (a cancel, a failure) after calling the game's tools but
            # before waiting: each call still waiting gets no answer now, and
            # one the game answered meanwhile keeps its answer.
            waits.waiting_calls_close(turn)
            closed = {
                e.get("id"): e for e in entries_so_far([turn.pk]).get(turn.pk, []) if not e.get("pending")
            }
            entries = [closed.get(e.get("id"), e) if e.get("pending") else e for e in entries]
        block_fields.update(entries=entries, tokens=entries_tokens(entries))
        # Speed: ORM statement building (studio/runtime/sql.py); guarded by bench/agent_server.py (server CPU per message).
        # The turn's recorded entries go as the block takes them.
        deleting = (TurnEntry, {"turn_id": turn.pk}) if recorded else None
        sql.update(Block, {"turn_id": turn.pk}, block_fields, deleting=deleting)
        # The one place a live turn ends: its hold goes back exactly once,
        # with what the run still owes, in the account's one write (last) —
        # or, with a call still open, when that call is charged.
        release, ends = (turn.held, True) if open_call is None else (Decimal(0), False)
        if bill is not None:
            bill.settle(release=release, turn_ends=ends)
        else:
            ledger.hold_release(game_id=turn.agent.game_id, amount=release, turn_ends=ends)
        turn.status, turn.reply, turn.error, turn.error_code = status, reply, error, code
        turn.error_class = error_class
        turn.cut_short_code, turn.cut_short = cut_short or ("", "")
        turn.ended_at, turn.lease_until = now, None
        cost = turn_cost(turn, bill.cost_lines() if bill is not None else None)
        wire = turn_wire(turn, cost=cost, entries=entries)
        publish_on_commit(turn.agent_id, event_types.turn_finished(agent=turn.agent.name, turn=wire))
        wakeups.notify_on_commit(wakeups.turns_key(turn.agent_id))
        _ended_on_commit(turn)
    return Ending(block_tokens=block_fields["tokens"], cost=cost, call_open=open_call is not None)


def _open_call_lease() -> timedelta:
    """How long an abandoned call may take to be charged: it is read on for
    up to a model timeout, and the SDK may have retries of its own to end."""
    timeout, retries = settings.STUDIO["MODEL_TIMEOUT_SECONDS"], settings.STUDIO["MODEL_MAX_RETRIES"]
    return timedelta(seconds=timeout * (retries + 2) + 30)


def turn_call_settle(
    turn: Turn, *, agent: Agent, price, usage: Usage | None, is_flagged: bool = True
) -> bool:
    """Charge the model call `turn` stopped waiting for (`usage`; None: the
    provider bills nothing) to its Model line, and give back the turn's
    hold — exactly once: the first caller to clear the turn's open call
    does it (the call's own thread, or a reap after its process died).
    `is_flagged` False: the turn was ended elsewhere, its hold already
    given back; only the charge is owed. True when this call settled it."""
    with transaction.atomic():
        release = Decimal(0)
        if is_flagged:
            # The turn's row before the account, as everywhere.
            held = (
                Turn.objects.select_for_update()
                .filter(pk=turn.pk, open_call_tokens__isnull=False)
                .values_list("held", flat=True)
                .first()
            )
            if held is None:
                return False
            Turn.objects.filter(pk=turn.pk).update(open_call_tokens=None, lease_until=None)
            release = held
        bill = ledger.TurnBill(game_id=agent.game_id, agent_name=agent.name, turn_id=turn.uuid)
        if usage is not None:
            bill.reload()
            bill.model_usage(price, usage)
        bill.settle(release=release, turn_ends=is_flagged)
    return True


def open_calls_settle(*, game_id: int | None = None) -> bool:
    """Settle the open calls (of the game, or of every game) whose turns'
    processes died before they could (their lease lapsed): each is charged
    the input tokens it sent, at the input price, and its hold goes back.
    True when there were any."""
    lapsed = Turn.objects.filter(open_call_tokens__isnull=False, lease_until__lt=timezone.now())
    if game_id is not None:
        lapsed = lapsed.filter(agent__game_id=game_id)
    settled = False
    for turn in lapsed.select_related("agent"):
        price = ledger.model_price(turn.agent.model)
        usage = Usage(input_tokens=turn.open_call_tokens)
        if turn_call_settle(turn, agent=turn.agent, price=price, usage=usage):
            log.warning(
                "turn %s: its process died before its last model call was charged; charged what it sent",
                turn.uuid,
            )
            settled = True
    return settled


def _ended_on_commit(turn: Turn) -> None:
    """Count and log the turn, once it has really ended (its ending
    committed): a failed one at WARNING, with its error code."""
    status, code, turn_id = turn.status, turn.error_code, turn.uuid
    seconds = (turn.ended_at - turn.created_at).total_seconds() if turn.created_at else 0.0

    def ended():
        metrics.turn_ended(status, code, seconds)
        if status == TurnStatus.FAILED:
            log.warning("turn %s ended failed (%s) after %.3f s", turn_id, code, seconds)
        else:
            log.info("turn %s ended %s after %.3f s", turn_id, status, seconds)

    transaction.on_commit(ended)


def turn_end_abruptly(
    turn: Turn, error: str, code: str = "internal_error", *, owed: tuple | None = None
) -> None:
    """End a live turn as failed, charging `owed` — (price, usages): model
    calls its run was billed for and had not charged — with its hold."""
    try:
        bill = None
        if owed is not None:
            price, usages = owed
            bill = ledger.TurnBill(game_id=turn.agent.game_id, agent_name=turn.agent.name, turn_id=turn.uuid)
            bill.reload()
            for usage in usages:
                bill.model_usage(price, usage)
        turn_finish(turn, TurnStatus.FAILED, error=error, code=code, bill=bill)
    except Exception:  # the database may be what failed; the lease will lapse
        pass


# --- cancel ---------------------------------------------------------------------------------


def turn_cancel(turn: Turn) -> Turn:
    """Ask a live turn to end. A queued turn ends at once; a running one
    ends at its next check, keeping its block, marked cancelled."""
    with transaction.atomic():
        # The agent's row first: a queued turn starts under it, so a cancel
        # cannot slip between a start's read and its write.
        Agent.objects.select_for_update().filter(pk=turn.agent_id).values_list("pk").first()
        locked = Turn.objects.select_for_update().select_related("agent").filter(pk=turn.pk).first()
        if locked is None:
            raise NotFound("The turn's agent was deleted.", code="turn_not_found")
        if locked.has_ended:
            raise Conflict(f"Turn {locked.uuid} has already ended ({locked.status}).", code="turn_ended")
        if locked.status in (TurnStatus.QUEUED, TurnStatus.WAITING):  # no process runs it
            turn_finish(locked, TurnStatus.CANCELLED)
        else:
            locked.cancel_requested = True
            locked.save(update_fields=["cancel_requested"])
            wakeups.notify_on_commit(wakeups.cancel_key(locked.agent_id))  # its process looks at once
    return locked
