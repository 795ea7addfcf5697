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
   waits holding no database connection (`studio.wakeups`). A
   non-transient turn gets the next block number as it starts, and its
   block starts with the player's message.
3. The loop: assemble the context (stored checkpoint block + verbatim blocks
   + this turn's block so far), call the model with no transaction open,
   charge its tokens; run each tool call in its own short transaction with
   its entry in the block and its "Memory access" fee; repeat until the
   model answers, within `MAX_MODEL_STEPS`. Before each call after the
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
import uuid
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.db import DataError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from billing import ledger
from memories.tools import MEMORY_TOOLS, tool_run
from studio import wakeups
from studio.errors import Conflict, DomainError, NotFound, PaymentRequired, Unavailable
from studio.events import publish_on_commit
from studio.text import storable, storable_json, unstorable_reason
from studio.tokens import count_message_tokens, count_tokens

from . import compaction
from .context import (
    Context,
    assistant_entry,
    context_assemble,
    entries_to_messages,
    entries_tokens,
    user_entry,
)
from .models import LIVE_STATUSES, Agent, Block, Checkpoint, CompactionReason, Turn, TurnStatus
from .providers import provider_for
from .providers.base import Cancelled, ModelReply, ModelRequest, ProviderError

log = logging.getLogger(__name__)

CONTROL_POLL_SECONDS = 0.2
CONTENT_MAX_CHARS = 100_000
IDEMPOTENCY_KEY_MAX_CHARS = 200
IDEMPOTENCY_WINDOW = timedelta(hours=24)


def _conf(key: str):
    return settings.STUDIO[key]


def _lease() -> timezone.datetime:
    return timezone.now() + timedelta(seconds=_conf("TURN_LEASE_SECONDS"))


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


class DeadlinePassed(Cancelled):
    """The turn has been live for TURN_DEADLINE_SECONDS: a provider stops as
    for a cancel, and the turn ends failed."""


# --- the send ------------------------------------------------------------------


def turn_send(
    *, agent: Agent, content: str, transient: bool = False, idempotency_key: str | None = None
) -> Turn:
    """Run one send to `agent` to its end and return the ended turn. With
    `idempotency_key`, a repeat of an earlier send returns its turn (waiting
    for it to end) instead of running another."""
    content_check(content)
    if idempotency_key is not None:
        idempotency_key_check(idempotency_key)
    new_tokens = count_tokens(content)
    _fits_or_refuse(agent, new_tokens)
    # Prices are read once per turn: a price change applies from the next
    # turn on, and every line keeps the price it was charged at.
    price = ledger.model_price(agent.model)
    request = _Request(content, transient, idempotency_key)
    turn, is_new = _turn_enqueue_or_reap(
        agent, request, ledger.hold_estimate(max_tokens=agent.max_tokens, price=price)
    )
    if not is_new:
        return _turn_follow(turn)
    if turn.status == TurnStatus.QUEUED:
        turn = _turn_wait(turn, content)
        if turn.has_ended:
            return turn
    try:
        return _TurnRun(agent, turn, content, new_tokens, price).run()
    except BaseException:
        _turn_end_abruptly(turn, "The studio hit an internal error while running this turn.")
        raise


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


class _Request:
    """A send as the client made it; `digest` tells a true repeat from
    another message under the same Idempotency-Key."""

    def __init__(self, content: str, transient: bool, idempotency_key: str | None):
        self.content, self.transient, self.idempotency_key = content, transient, idempotency_key
        body = json.dumps({"content": content, "transient": transient}, sort_keys=True)
        self.digest = hashlib.sha256(body.encode()).hexdigest() if idempotency_key else ""


def _fits_or_refuse(agent: Agent, new_tokens: int) -> None:
    """413 when the message could never fit: with the system prompt and the
    checkpoint's context block (which no compaction empties) it is already
    over maxTokens, so no compaction could make room for it."""
    if agent.system_tokens + new_tokens > agent.max_tokens:
        block_tokens = 0  # over without the block: no need to read it
    else:
        block = Checkpoint.objects.filter(agent=agent).order_by("-id").values_list("block_tokens", flat=True)
        block_tokens = block.first() or 0
    floor = agent.system_tokens + block_tokens + new_tokens
    if floor > agent.max_tokens:
        raise DomainError(
            f"This message is {new_tokens} tokens; with the system prompt ({agent.system_tokens}) and "
            f"the checkpoint's context block ({block_tokens}) the context would be {floor} tokens, "
            f"over maxTokens {agent.max_tokens}, and no compaction can make that room. Send a "
            "shorter message, or raise compaction.maxTokens.",
            status=413,
            code="context_too_large",
        )


def _turn_enqueue_or_reap(agent: Agent, request: _Request, held) -> tuple[Turn, bool]:
    """`_turn_enqueue`; refused for want of credits, first end the game's
    dead turns (their holds may be what is missing) and try once more."""
    try:
        return _turn_enqueue(agent, request, held)
    except PaymentRequired:
        if not turns_reap(game_id=agent.game_id):
            raise
    return _turn_enqueue(agent, request, held)


def _turn_enqueue(agent: Agent, request: _Request, held) -> tuple[Turn, bool]:
    """Queue the send, holding `held` credits for it, and start it if it is
    first; or, for a repeat under an Idempotency-Key, the earlier turn.
    Returns the turn and whether it is new."""
    with transaction.atomic():
        if request.idempotency_key or request.transient:
            _agent_lock(agent)
        if request.idempotency_key:
            earlier = _turn_by_key(agent, request)
            if earlier is not None:
                return earlier, False
        # A message takes the agent's next block number as it locks the row
        # (one statement), and gives it back in the rare case it must queue.
        block_number = None if request.transient else _block_take(agent)
        head = live_head(agent)
        if head is not None:
            _queue_room_check(agent)
        ledger.hold_take(game=agent.game, amount=held)
        turn = Turn(
            agent=agent,
            is_transient=request.transient,
            lease_until=_lease(),
            held=held,
            idempotency_key=request.idempotency_key,
            request_digest=request.digest,
        )
        if head is None:
            _start(agent, turn, request.content, block_number)
        else:
            if block_number is not None:
                _block_take(agent, -1)
            turn.save()
    return turn, True


def _agent_lock(agent: Agent) -> None:
    if not Agent.objects.select_for_update().filter(pk=agent.pk).values_list("pk").first():
        raise _gone(agent)


def _turn_by_key(agent: Agent, request: _Request) -> Turn | None:
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
    """429 when the agent already has MAX_QUEUED_SENDS sends waiting: one
    game cannot pile up waiting requests without bound."""
    most = _conf("MAX_QUEUED_SENDS")
    if Turn.objects.filter(agent=agent, status=TurnStatus.QUEUED).count() >= most:
        raise DomainError(
            f"Agent '{agent.name}' already has {most} sends waiting behind its running turn; "
            "wait for some to end, then send again.",
            status=429,
            code="agent_busy",
        )


def _block_take(agent: Agent, step: int = 1) -> int:
    """Move the agent's last block number by `step` (1: take the next one;
    -1: give it back) and return it. Locks the agent row."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Agent._meta.db_table} SET last_block = last_block + %s WHERE id = %s RETURNING last_block",
            [step, agent.pk],
        )
        row = cursor.fetchone()
    if row is None:
        raise _gone(agent)
    agent.last_block = row[0]
    return agent.last_block


def _gone(agent: Agent) -> NotFound:
    return NotFound(f"Agent '{agent.name}' was deleted before this send could start.", code="agent_not_found")


# --- waiting -----------------------------------------------------------------------


def _turn_wait(turn: Turn, content: str) -> Turn:
    """Wait for the agent's earlier sends to end, then start `turn`. Woken
    when one of the agent's turns ends; holds no connection meanwhile, and
    renews the turn's lease each time it looks."""
    seconds = _conf("SEND_WAIT_SECONDS")
    give_up = time.monotonic() + seconds
    with wakeups.listening(wakeups.turns_key(turn.agent_id)) as waiter:
        while not _turn_try_start(turn, content):
            left = give_up - time.monotonic()
            if left <= 0:
                _turn_finish(
                    turn,
                    TurnStatus.FAILED,
                    error="It waited too long for the agent's earlier sends.",
                    code="busy",
                )
                raise Unavailable(
                    f"The agent is still busy with earlier sends after {seconds} s; try again later.",
                    code="agent_busy",
                    retry_after=5,
                )
            waiter.wait(left)
    return turn


def _turn_try_start(turn: Turn, content: str) -> bool:
    """Start queued `turn` if no earlier send of its agent is live. True
    when it started or has ended (a cancel)."""
    now = timezone.now()
    ahead = Turn.objects.filter(agent_id=turn.agent_id, status__in=LIVE_STATUSES, id__lt=turn.id).only(
        "lease_until", "created_at"
    )
    if ahead and not any(_death(t, now) for t in ahead):
        if Turn.objects.filter(pk=turn.pk, status=TurnStatus.QUEUED).update(lease_until=_lease()):
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


def _turn_follow(turn: Turn) -> Turn:
    """Wait for an earlier send's turn (a repeat under its Idempotency-Key)
    to end, and return it. A turn whose process died meanwhile is ended
    here."""
    with wakeups.listening(wakeups.turns_key(turn.agent_id)) as waiter:
        while True:
            try:
                turn.refresh_from_db()
            except Turn.DoesNotExist:
                raise NotFound(
                    "The agent was deleted while this send waited.", code="agent_not_found"
                ) from None
            if turn.has_ended:
                return turn
            if _death(turn, timezone.now()):
                turns_end_dead(agent_id=turn.agent_id)
                continue
            waiter.wait(wakeups.POLL_SECONDS)


# --- the slot --------------------------------------------------------------------------


def _death(turn: Turn, now) -> tuple[str, str] | None:
    """(code, error) when a live turn can be taken as dead: its process
    stopped renewing its lease, or it has outlived the turn deadline."""
    if turn.lease_until and turn.lease_until < now:
        return "process_stopped", "The process running this turn stopped before it ended."
    deadline = _conf("TURN_DEADLINE_SECONDS")
    if turn.created_at and turn.created_at + timedelta(seconds=deadline) < now:
        return "deadline", f"The turn did not end within {deadline} s (STUDIO_TURN_DEADLINE_SECONDS)."
    return None


def live_head(agent: Agent, turn: Turn | None = None) -> Turn | None:
    """The agent's oldest live send, other than dead ones, which are ended
    on the way (giving their holds back). `turn`, the caller's own, is
    never taken as dead. Call under the agent row's lock."""
    now = timezone.now()
    head = None
    for live in Turn.objects.filter(agent=agent, status__in=LIVE_STATUSES).order_by("id"):
        death = None if turn is not None and live.pk == turn.pk else _death(live, now)
        if death:
            live.agent = agent
            _turn_finish(live, TurnStatus.FAILED, error=death[1], code=death[0])
        elif head is None:
            head = live
    return head


def turns_end_dead(*, agent_id: int) -> None:
    with transaction.atomic():
        agent = Agent.objects.select_for_update().filter(pk=agent_id).first()
        if agent is not None:
            live_head(agent)


def turns_reap(*, game_id: int) -> bool:
    """End the game's dead live turns on every agent — an idle agent's dead
    turn would otherwise keep its hold for good. True when there were any."""
    now = timezone.now()
    deadline = now - timedelta(seconds=_conf("TURN_DEADLINE_SECONDS"))
    dead = Turn.objects.filter(agent__game_id=game_id, status__in=LIVE_STATUSES).filter(
        Q(lease_until__lt=now) | Q(created_at__lt=deadline)
    )
    agents = set(dead.values_list("agent_id", flat=True))
    for agent_id in agents:
        turns_end_dead(agent_id=agent_id)
    return bool(agents)


def _start(agent: Agent, turn: Turn, content: str, block_number: int | None = None) -> bool:
    """Make `turn` the running one (saving it, new or queued); a
    non-transient turn takes the next block number (or the one it has
    already taken, `block_number`), its block starting with the player's
    message. Under the agent row's lock. False when a queued turn has ended
    meanwhile: it is not started."""
    turn.status = TurnStatus.RUNNING
    turn.started_at = timezone.now()
    turn.lease_until = _lease()
    if not turn.is_transient:
        turn.block_number = block_number if block_number is not None else _block_take(agent)
    if turn.pk is None:
        turn.save()
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
        Block.objects.create(agent=agent, number=turn.block_number, turn=turn, entries=[user_entry(content)])
    publish_on_commit(
        agent.pk,
        {
            "type": "turn.started",
            "agent": agent.name,
            "turnId": str(turn.uuid),
            "block": turn.block_number,
            "transient": turn.is_transient,
        },
    )
    return True


# --- the loop ----------------------------------------------------------------------


class _Control:
    """Lets a provider see a cancel while it works; renews the turn's lease;
    ends the turn at its deadline."""

    def __init__(self, turn: Turn):
        self.turn = turn
        self.next_poll = time.monotonic() + CONTROL_POLL_SECONDS
        self.deadline = turn.created_at + timedelta(seconds=_conf("TURN_DEADLINE_SECONDS"))

    def check(self) -> None:
        if time.monotonic() < self.next_poll:
            return
        self.next_poll = time.monotonic() + CONTROL_POLL_SECONDS
        Turn.objects.filter(pk=self.turn.pk, status=TurnStatus.RUNNING).update(lease_until=_lease())
        state = Turn.objects.filter(pk=self.turn.pk).values("status", "cancel_requested").first()
        _connection_release()  # back to waiting on the model
        if state is None or state["cancel_requested"] or state["status"] != TurnStatus.RUNNING:
            raise Cancelled()
        if timezone.now() > self.deadline:
            raise DeadlinePassed()

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
            self.check()


class _TurnRun:
    def __init__(self, agent: Agent, turn: Turn, content: str, new_tokens: int, price):
        self.agent = agent
        self.turn = turn
        self.context: Context = context_assemble(agent, transient=turn.is_transient)
        self.entries = [user_entry(content)]
        self.stored_entries = 1  # how many of `entries` the block holds
        self.new_tokens = new_tokens
        self.control = _Control(turn)
        self.price = price
        self.fee = None
        # A model step's tokens are charged in the transaction that records
        # what the step did (its tool call, or the turn's end).
        self.unbilled: ModelReply | None = None
        self.bill = ledger.TurnBill(game_id=agent.game_id, agent_name=agent.name, turn_id=turn.uuid)

    def run(self) -> Turn:
        try:
            self._make_room()
            for step in range(1, _conf("MAX_MODEL_STEPS") + 1):
                self.control.check()
                request = self._request()
                if step > 1:
                    self._hold_cover(request)
                provider = provider_for(self.agent.model)
                _connection_release()
                reply = _storable_reply(provider.complete(request, self.control))
                self.unbilled = reply
                if not reply.tool_calls:
                    if reply.text is not None:
                        self.entries.append(assistant_entry(reply.text))
                    return self._end(TurnStatus.COMPLETED, reply=reply.text or "")
                if reply.text:
                    with self._step():
                        self._record({**assistant_entry(reply.text), "step": step})
                for call in reply.tool_calls:
                    self._tool_call(call, step)
        except DeadlinePassed:
            deadline = _conf("TURN_DEADLINE_SECONDS")
            return self._fail(
                f"The turn did not end within {deadline} s (STUDIO_TURN_DEADLINE_SECONDS).", "deadline"
            )
        except Cancelled:
            return self._end(TurnStatus.CANCELLED)
        except ProviderError as error:
            return self._fail(f"The model call failed: {error}", "model_error")
        except TurnFailed as failure:
            return self._fail(failure.message, failure.code)
        except DataError:
            log.warning("turn %s: the database refused what the model sent", self.turn.uuid, exc_info=True)
            return self._fail(
                "The studio could not store what the model sent in this step.", "unstorable_output"
            )
        return self._fail(
            f"The model made more than {_conf('MAX_MODEL_STEPS')} calls without replying.", "too_many_steps"
        )

    def _make_room(self) -> None:
        """A send that would pass maxTokens waits (bounded) for a compaction,
        renewing its lease and watching for a cancel meanwhile; a context
        still over maxTokens after it is never sent."""
        if self.context.total_tokens + self.new_tokens <= self.agent.max_tokens:
            return
        started = time.monotonic()
        pending = compaction.compaction_request(agent=self.agent, reason=CompactionReason.THRESHOLD)
        pending = compaction.compaction_wait(self.agent, pending, on_wake=self.control.check)
        self.turn.compaction_wait_ms = int((time.monotonic() - started) * 1000)
        Turn.objects.filter(pk=self.turn.pk).update(compaction_wait_ms=self.turn.compaction_wait_ms)
        self.context = context_assemble(self.agent, transient=self.turn.is_transient)
        needed = self.context.total_tokens + self.new_tokens
        if needed <= self.agent.max_tokens:
            return
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

    def _hold_cover(self, request: ModelRequest) -> None:
        """Before a model call after the first: the game must still cover
        what this call can cost. The turn's hold grows when the context has
        outgrown it; either way one statement checks the balance (less every
        hold) and the monthly cap."""
        worst = ledger.hold_estimate(max_tokens=request.input_tokens, price=self.price)
        extra = max(worst - self.turn.held, 0)
        if extra:
            with transaction.atomic():
                # The turn's row before the account, as everywhere.
                Turn.objects.filter(pk=self.turn.pk).update(held=F("held") + extra)
                fits = ledger.hold_fits(game_id=self.agent.game_id, amount=extra)
                if not fits:
                    transaction.set_rollback(True)
            if fits:
                self.turn.held += extra
        else:
            fits = ledger.hold_fits(game_id=self.agent.game_id, amount=extra)
        if not fits:
            raise TurnFailed(
                "The game cannot cover another model call in this turn (its balance less what running "
                "turns hold, or its monthly cap); the turn stopped before it.",
                "budget_exhausted",
            )

    def _request(self) -> ModelRequest:
        ctx = self.context
        return ModelRequest(
            system=ctx.system,
            context_block=ctx.context_block,
            messages=ctx.messages + entries_to_messages(self.entries),
            tools=ctx.tools,
            input_tokens=ctx.total_tokens + self.new_tokens,
        )

    @contextmanager
    def _step(self):
        """One transaction of the run. If it fails, what it did to the run's
        own state (entries, the unbilled step, the bill) is undone too."""
        kept = (len(self.entries), self.new_tokens, self.unbilled)
        try:
            with transaction.atomic():
                yield
        except BaseException:
            del self.entries[kept[0] :]
            self.new_tokens, self.unbilled = kept[1], kept[2]
            self.bill.reload()
            raise
        self.stored_entries = len(self.entries)

    def _charge_unbilled(self) -> None:
        """Charge the last model step, inside the caller's transaction."""
        if self.unbilled is not None:
            self.bill.model_usage(self.price, self.unbilled.usage)
            self.unbilled = None

    def _record(self, entry: dict) -> None:
        """Keep `entry` in the block (inside the caller's transaction)."""
        self.entries.append(entry)
        self.new_tokens += sum(count_message_tokens(m) for m in entries_to_messages([entry]))
        if not self.turn.is_transient:
            Block.objects.filter(turn=self.turn).update(entries=self.entries)

    def _tool_call(self, call, step: int) -> None:
        offered = call.name in self.context.tools
        with self._step():
            # The tool takes the store (agent row) lock before any charge
            # takes the account's: always agent first, then account.
            if offered:
                result = tool_run(
                    agent=self.agent, name=call.name, arguments=call.arguments, turn_id=self.turn.uuid
                )
                if self.fee is None:
                    self.fee = ledger.fee(ledger.MEMORY_ACCESS)
                self.bill.memory_access(self.fee)
                text, is_error = result.text, result.is_error
            else:
                text, is_error = _not_offered(call.name, self.agent, self.turn), True
            self._charge_unbilled()
            entry = {
                "type": "tool_call",
                "id": call.id or f"call_{uuid.uuid4().hex[:12]}",
                "step": step,
                "name": call.name,
                "arguments": call.arguments,
                "result": text,
                "isError": is_error,
            }
            self._record(entry)
            # Last: the account row stays locked until the commit.
            self.bill.settle()
            publish_on_commit(
                self.agent.pk,
                {
                    "type": "tool_call",
                    "agent": self.agent.name,
                    "turnId": str(self.turn.uuid),
                    "name": call.name,
                    "arguments": call.arguments,
                    "result": text,
                    "isError": is_error,
                },
            )

    def _fail(self, error: str, code: str) -> Turn:
        return self._end(TurnStatus.FAILED, error=error, code=code)

    def _end(self, status: str, *, reply: str = "", error: str = "", code: str = "") -> Turn:
        try:
            block_tokens = self._finish(status, reply=reply, error=error, code=code)
        except DataError:
            # What this step said could not be stored: end with what was.
            log.warning("turn %s: the database refused its ending", self.turn.uuid, exc_info=True)
            del self.entries[self.stored_entries :]
            block_tokens = self._finish(
                TurnStatus.FAILED,
                error="The studio could not store what the model sent in this step.",
                code="unstorable_output",
            )
        if not self.turn.is_transient:
            compaction.compaction_after_turn(
                agent=self.agent,
                status=self.turn.status,
                block_number=self.turn.block_number,
                context_tokens=self.context.total_tokens + block_tokens,
                checkpoint=self.context.checkpoint,
            )
        return self.turn

    def _finish(self, status: str, **ending) -> int:
        with self._step():
            self._charge_unbilled()
            return _turn_finish(self.turn, status, entries=self.entries, bill=self.bill, **ending)


def _storable_reply(reply: ModelReply) -> ModelReply:
    """What a model sent, with the characters the database refuses replaced."""
    if reply.text:
        reply.text = storable(reply.text)
    for call in reply.tool_calls:
        call.name = storable(call.name)
        call.arguments = storable_json(call.arguments)
    return reply


def _not_offered(name: str, agent: Agent, turn: Turn) -> str:
    if name in MEMORY_TOOLS and turn.is_transient:
        return "Memory tools are not offered on a transient send."
    if name in MEMORY_TOOLS:
        return "Memory is off for this agent: it has no memory tools."
    return f"There is no tool named '{name}'."


# --- ending ---------------------------------------------------------------------------


def _turn_finish(
    turn: Turn,
    status: str,
    *,
    reply: str = "",
    error: str = "",
    code: str = "",
    entries: list | None = None,
    bill: ledger.TurnBill | None = None,
) -> int:
    """End a live turn and its block; returns the block's tokens. `bill`:
    the running turn's charges, settled here with its hold (without one,
    the turn's lines are read for its `turn.finished` event)."""
    now = timezone.now()
    with transaction.atomic(savepoint=False):
        updated = Turn.objects.filter(pk=turn.pk, status__in=LIVE_STATUSES).update(
            status=status, reply=reply, error=error, error_code=code, ended_at=now, lease_until=None
        )
        if not updated:
            # Ended elsewhere meanwhile (its hold went back then); what the
            # run owes is still owed.
            if bill is not None:
                bill.settle()
            turn.refresh_from_db()
            return 0
        block_fields = {"status": status, "tokens": 0}
        if entries is not None:
            block_fields.update(entries=entries, tokens=entries_tokens(entries))
        else:
            block = Block.objects.filter(turn=turn).only("entries").first()
            if block is not None:
                block_fields["tokens"] = entries_tokens(block.entries)
        Block.objects.filter(turn=turn).update(**block_fields)
        # The one place a live turn ends: its hold goes back exactly once,
        # with what the run still owes, in the account's one write (last).
        if bill is not None:
            bill.settle(release=turn.held)
        else:
            ledger.hold_release(game_id=turn.agent.game_id, amount=turn.held)
        turn.status, turn.reply, turn.error, turn.error_code = status, reply, error, code
        turn.ended_at, turn.lease_until = now, None
        # Kept on the instance for the caller's answer, which need not read them back.
        turn.ended_cost = turn_cost(turn, bill.cost_lines() if bill is not None else None)
        turn.ended_entries = entries
        event = {
            "type": "turn.finished",
            "agent": turn.agent.name,
            "turnId": str(turn.uuid),
            "status": status,
            "block": turn.block_number,
            "transient": turn.is_transient,
            "reply": reply,
            "error": error or None,
            "cost": turn.ended_cost,
        }
        publish_on_commit(turn.agent_id, event)
        wakeups.notify_on_commit(wakeups.turns_key(turn.agent_id))
    return block_fields["tokens"]


def _turn_end_abruptly(turn: Turn, error: str) -> None:
    try:
        _turn_finish(turn, TurnStatus.FAILED, error=error, code="internal_error")
    except Exception:  # the database may be what failed; the lease will lapse
        pass


# --- cancel and reads ----------------------------------------------------------------


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
        if locked.status == TurnStatus.QUEUED:
            _turn_finish(locked, TurnStatus.CANCELLED)
        else:
            locked.cancel_requested = True
            locked.save(update_fields=["cancel_requested"])
    return locked


def turn_cost(turn: Turn, lines: list | None = None) -> dict:
    lines = ledger.turn_lines(turn.uuid) if lines is None else ledger.lines_in_order(lines)
    return {
        "total": ledger.credits_text(sum((line.amount for line in lines), 0)),
        "lines": [
            {
                "kind": line.kind,
                "label": line.label,
                "quantity": line.quantity,
                "amount": ledger.credits_text(line.amount),
            }
            for line in lines
        ],
    }


def turn_tool_calls(turn: Turn, entries: list | None = None) -> list[dict]:
    if entries is None:
        block = Block.objects.filter(turn=turn).only("entries").first()
        entries = block.entries if block else []
    return [
        {"name": e["name"], "arguments": e["arguments"], "result": e["result"], "isError": e["isError"]}
        for e in entries
        if e["type"] == "tool_call"
    ]
