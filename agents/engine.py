"""What happens on a send.

1. The turn is queued: a `Turn` row, whose id orders the agent's sends by
   arrival. It starts when no earlier send of the agent is still live —
   decided under the agent row's lock in a short transaction, so it holds
   across processes. A non-transient turn gets the next block number then,
   and its block starts with the player's message.
2. The loop: assemble the context (stored checkpoint block + verbatim blocks
   + this turn's block so far), call the model with no transaction open,
   charge its tokens; run each tool call in its own short transaction with
   its entry in the block and its "Memory access" fee; repeat until the
   model answers, within `MAX_MODEL_STEPS`.
3. The turn ends `completed`, `cancelled` (a cancel was asked for) or
   `failed` (the model call failed): the block keeps everything it got.

A turn holds a lease it renews while it works; a turn whose process died
lets the lease lapse, and the agent's next send ends it as failed. A
transient send runs the same loop with no tools and no block: it leaves no
trace in the agent's history.
"""

import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from billing import ledger
from memories.tools import MEMORY_TOOLS, tool_run
from studio.errors import Conflict, DomainError, NotFound, Unavailable
from studio.events import publish_on_commit
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
from .models import LIVE_STATUSES, Agent, Block, CompactionReason, Turn, TurnStatus
from .providers import provider_for
from .providers.base import Cancelled, ModelReply, ModelRequest, ProviderError

CONTROL_POLL_SECONDS = 0.2
CONTENT_MAX_CHARS = 100_000


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


# --- the send ------------------------------------------------------------------


def turn_send(*, agent: Agent, content: str, transient: bool = False) -> Turn:
    """Run one send to `agent` to its end and return the ended turn."""
    if not isinstance(content, str) or not content.strip():
        raise DomainError("'content' must be a non-empty string: what the player says.")
    if len(content) > CONTENT_MAX_CHARS:
        raise DomainError(
            f"'content' is over {CONTENT_MAX_CHARS:,} characters.", status=413, code="too_large"
        )
    # Prices are read once per turn: a price change applies from the next
    # turn on, and every line keeps the price it was charged at.
    price = ledger.model_price(agent.model)
    turn = _turn_enqueue(
        agent, content, transient, ledger.hold_estimate(max_tokens=agent.max_tokens, price=price)
    )
    if turn.status == TurnStatus.QUEUED:
        turn = _turn_wait(turn, content)
        if turn.has_ended:
            return turn
    try:
        return _TurnRun(agent, turn, content, price).run()
    except BaseException:
        _turn_end_abruptly(turn, "The studio hit an internal error while running this turn.")
        raise


def _turn_enqueue(agent: Agent, content: str, transient: bool, held) -> Turn:
    """Queue the send, holding `held` credits for it (402 when the game
    cannot pay — then nothing is queued), and start it if it is first."""
    with transaction.atomic():
        # Locks are always taken agent row first, then the game's account
        # (as a tool call does: store, then its fee), so they cannot deadlock.
        # A message takes the agent's next block number as it locks the row
        # (one statement), and gives it back in the rare case it must queue.
        if transient:
            if not Agent.objects.select_for_update().filter(pk=agent.pk).values_list("pk").first():
                raise _gone(agent)
            block_number = None
        else:
            block_number = _block_take(agent)
        ledger.hold_take(game=agent.game, amount=held)
        turn = Turn(agent=agent, is_transient=transient, lease_until=_lease(), held=held)
        if _live_head(agent) is None:
            _start(agent, turn, content, block_number)
        else:
            if block_number is not None:
                _block_take(agent, -1)
            turn.save()
    return turn


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


def _turn_wait(turn: Turn, content: str) -> Turn:
    """Wait for the agent's earlier sends to end, then start `turn`."""
    deadline = time.monotonic() + _conf("SEND_WAIT_SECONDS")
    pause = 0.005
    while time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(pause * 1.5, 0.1)
        earlier = Turn.objects.filter(agent_id=turn.agent_id, status__in=LIVE_STATUSES, id__lt=turn.id)
        lapsed = earlier.filter(lease_until__lt=timezone.now()).exists()
        if earlier.exists() and not lapsed:
            Turn.objects.filter(pk=turn.pk, status=TurnStatus.QUEUED).update(lease_until=_lease())
            turn.refresh_from_db(fields=["status"])
            if turn.has_ended:  # cancelled while it waited
                return turn
            continue
        with transaction.atomic():
            agent = Agent.objects.select_for_update().get(pk=turn.agent_id)
            turn.refresh_from_db()
            if turn.has_ended:
                return turn
            if _try_start(agent, turn, content):
                return turn
    _turn_finish(turn, TurnStatus.FAILED, error="It waited too long for the agent's earlier sends.")
    raise Unavailable(
        f"The agent is still busy with earlier sends after {_conf('SEND_WAIT_SECONDS')} s; try again later.",
        code="agent_busy",
    )


def _live_head(agent: Agent, turn: Turn | None = None) -> Turn | None:
    """The agent's oldest live send. Live turns whose process is gone (a
    lapsed lease) are ended on the way. Call under the agent row's lock."""
    now = timezone.now()
    head = None
    for live in Turn.objects.filter(agent=agent, status__in=LIVE_STATUSES).order_by("id"):
        if (turn is None or live.pk != turn.pk) and live.lease_until and live.lease_until < now:
            live.agent = agent
            _turn_finish(
                live, TurnStatus.FAILED, error="The process running this turn stopped before it ended."
            )
        elif head is None:
            head = live
    return head


def _try_start(agent: Agent, turn: Turn, content: str) -> bool:
    """Start queued `turn` if it is now the agent's oldest live send. Runs
    under the agent row's lock, so two sends cannot both start."""
    head = _live_head(agent, turn)
    if head is None or head.pk != turn.pk:
        return False
    _start(agent, turn, content)
    return True


def _start(agent: Agent, turn: Turn, content: str, block_number: int | None = None) -> None:
    """Make `turn` the running one (saving it, new or queued); a
    non-transient turn takes the next block number (or the one it has
    already taken, `block_number`), its block starting with the player's
    message. Under the agent row's lock."""
    turn.status = TurnStatus.RUNNING
    turn.started_at = timezone.now()
    turn.lease_until = _lease()
    if not turn.is_transient:
        turn.block_number = block_number if block_number is not None else _block_take(agent)
    if turn.pk:
        turn.save(update_fields=["status", "started_at", "lease_until", "block_number"])
    else:
        turn.save()
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


# --- the loop ----------------------------------------------------------------------


class _Control:
    """Lets a provider see a cancel while it works; renews the turn's lease."""

    def __init__(self, turn: Turn):
        self.turn = turn
        self.next_poll = time.monotonic() + CONTROL_POLL_SECONDS

    def check(self) -> None:
        if time.monotonic() < self.next_poll:
            return
        self.next_poll = time.monotonic() + CONTROL_POLL_SECONDS
        Turn.objects.filter(pk=self.turn.pk, status=TurnStatus.RUNNING).update(lease_until=_lease())
        state = Turn.objects.filter(pk=self.turn.pk).values("status", "cancel_requested").first()
        _connection_release()  # back to waiting on the model
        if state is None or state["cancel_requested"] or state["status"] != TurnStatus.RUNNING:
            raise Cancelled()

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
            self.check()


class _TurnRun:
    def __init__(self, agent: Agent, turn: Turn, content: str, price):
        self.agent = agent
        self.turn = turn
        self.context: Context = context_assemble(agent, transient=turn.is_transient)
        self.entries = [user_entry(content)]
        self.new_tokens = count_tokens(content)
        self.control = _Control(turn)
        self.price = price
        self.fee = None
        # A model step's tokens are charged in the transaction that records
        # what the step did (its tool call, or the turn's end).
        self.unbilled: ModelReply | None = None
        self.bill = ledger.TurnBill(game_id=agent.game_id, agent_name=agent.name, turn_id=turn.uuid)

    def run(self) -> Turn:
        if not self._fits_after_compaction():
            return self._end(
                TurnStatus.FAILED,
                error=(
                    f"The context would be {self.context.total_tokens + self.new_tokens} tokens, over "
                    f"maxTokens {self.agent.max_tokens}, and the compaction that would make room did "
                    "not finish in time."
                ),
            )
        for step in range(1, _conf("MAX_MODEL_STEPS") + 1):
            try:
                self.control.check()
                provider = provider_for(self.agent.model)
                request = self._request()
                _connection_release()
                reply = provider.complete(request, self.control)
            except Cancelled:
                return self._end(TurnStatus.CANCELLED)
            except ProviderError as error:
                return self._end(TurnStatus.FAILED, error=f"The model call failed: {error}")
            self.unbilled = reply
            if not reply.tool_calls:
                if reply.text is not None:
                    self.entries.append(assistant_entry(reply.text))
                return self._end(TurnStatus.COMPLETED, reply=reply.text or "")
            if reply.text:
                self._record({**assistant_entry(reply.text), "step": step})
            for call in reply.tool_calls:
                self._tool_call(call, step)
        return self._end(
            TurnStatus.FAILED,
            error=f"The model made more than {_conf('MAX_MODEL_STEPS')} calls without replying.",
        )

    def _fits_after_compaction(self) -> bool:
        """A send that would pass maxTokens waits (bounded) for a compaction
        rather than send an oversize context. False if it timed out."""
        if self.context.total_tokens + self.new_tokens <= self.agent.max_tokens:
            return True
        started = time.monotonic()
        pending = compaction.compaction_request(agent=self.agent, reason=CompactionReason.THRESHOLD)
        pending = compaction.compaction_wait(self.agent, pending)
        self.turn.compaction_wait_ms = int((time.monotonic() - started) * 1000)
        Turn.objects.filter(pk=self.turn.pk).update(compaction_wait_ms=self.turn.compaction_wait_ms)
        self.context = context_assemble(self.agent, transient=self.turn.is_transient)
        return not pending.is_live

    def _request(self) -> ModelRequest:
        ctx = self.context
        return ModelRequest(
            system=ctx.system,
            context_block=ctx.context_block,
            messages=ctx.messages + entries_to_messages(self.entries),
            tools=ctx.tools,
            input_tokens=ctx.total_tokens + self.new_tokens,
        )

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
        with transaction.atomic():
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

    def _end(self, status: str, *, reply: str = "", error: str = "") -> Turn:
        with transaction.atomic():
            self._charge_unbilled()
            block_tokens = _turn_finish(
                self.turn,
                status,
                reply=reply,
                error=error,
                entries=self.entries,
                bill=self.bill,
            )
        if not self.turn.is_transient:
            compaction.compaction_after_turn(
                agent=self.agent,
                status=status,
                block_number=self.turn.block_number,
                context_tokens=self.context.total_tokens + block_tokens,
                checkpoint=self.context.checkpoint,
            )
        return self.turn


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
    entries: list | None = None,
    bill: ledger.TurnBill | None = None,
) -> int:
    """End a live turn and its block; returns the block's tokens. `bill`:
    the running turn's charges, settled here with its hold (without one,
    the turn's lines are read for its `turn.finished` event)."""
    now = timezone.now()
    with transaction.atomic(savepoint=False):
        updated = Turn.objects.filter(pk=turn.pk, status__in=LIVE_STATUSES).update(
            status=status, reply=reply, error=error, ended_at=now, lease_until=None
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
        turn.status, turn.reply, turn.error = status, reply, error
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
    return block_fields["tokens"]


def _turn_end_abruptly(turn: Turn, error: str) -> None:
    try:
        _turn_finish(turn, TurnStatus.FAILED, error=error)
    except Exception:  # the database may be what failed; the lease will lapse
        pass


# --- cancel and reads ----------------------------------------------------------------


def turn_cancel(turn: Turn) -> Turn:
    """Ask a live turn to end. A queued turn ends at once; a running one
    ends at its next check, keeping its block, marked cancelled."""
    with transaction.atomic():
        locked = Turn.objects.select_for_update().get(pk=turn.pk)
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
