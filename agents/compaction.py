"""Compaction: folding old blocks into a checkpoint.

When an agent's context passes a soft threshold below `maxTokens`, after a
turn commits, a compaction is queued (at most one live per agent). It runs
off the turn's path — on a Celery worker, in a background thread on the
embedded default, or inline in tests — in three steps:

1. Plan, reading without locks: the checkpoint in force, the blocks to fold
   (the oldest, keeping the newest that fit in a share of the budget; or,
   for a forced or manual compaction, all but the newest) and the open
   memories with the version read.
2. Summarize, with no transaction open: one model call under `summarize`
   (previous summary + folded messages + open memories → new summary and
   rewrites of open memories). None under `sliding-window`, and none when
   there is nothing new to summarize (the previous summary carries over).
3. Install, in one transaction under the agent's lock: apply each rewrite
   that is still valid (`memories.store.memory_rewrite_by_compactor` keeps
   the non-blind-write rule and the limits), render the context block from
   the store as it now stands, write the checkpoint, mark the blocks
   folded, charge the compaction's tokens. If another checkpoint was
   installed since the plan was read, this run stands down.

A run that fails (the model, a crash) leaves the previous checkpoint in
force and changes nothing; the compaction is tried again. Running the same
compaction twice installs at most one checkpoint.

The forced checkpoint: once the oldest verbatim block has aged a whole
window (`FORCED_CHECKPOINT_BLOCKS`, 200), everything before the current
block is folded. A cancelled turn ages history without this check.
"""

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from agents.models import (
    ENDED_STATUSES,
    Agent,
    Block,
    Checkpoint,
    CheckpointKind,
    Compaction,
    CompactionReason,
    CompactionStatus,
    CompactionType,
    TurnStatus,
)
from agents.providers import provider_for
from agents.providers.base import CompactionReply, CompactionRequest, ProviderError, Usage, usage_total
from agents.providers.prompts import COMPACTOR_INSTRUCTIONS, compaction_output_tokens, compaction_prompt
from agents.sending.context import (
    checkpoint_fields,
    closed_listing,
    current_checkpoint,
    entries_to_messages,
    fixed_tokens,
    open_memories_snapshot,
)
from billing import ledger
from memories.models import MemoryEvent, Writer
from memories.store import memory_rewrite_by_compactor, open_tokens
from studio.celery import app as celery_app
from studio.errors import NotFound, PaymentRequired, Unavailable
from studio.live import event_types
from studio.live.events import publish_on_commit
from studio.ops import logs, metrics
from studio.runtime import sql, wakeups
from studio.runtime.leases import lease_kept, lease_until
from studio.text import storable
from studio.tokens import count_tokens

log = logging.getLogger(__name__)

# The Celery task that runs one compaction (`agents.tasks`).
COMPACTION_TASK = "agents.tasks.compaction_task"


class CompactionRetry(Exception):
    """This attempt failed; the compaction is queued to be tried again
    (unless it is `CompactionFailed`)."""


class CompactionFailed(CompactionRetry):
    """This attempt was the last: the compaction has failed for good."""


class CompactionAwaitsCredits(PaymentRequired):
    """The game cannot pay for a compaction's model call (its balance less
    what is held, or its monthly cap): a manual one is refused, an
    automatic one waits, and the agent's sends are refused until it can."""

    code = "insufficient_credits"


# --- when ---------------------------------------------------------------------------


def compaction_after_turn(
    *,
    agent: Agent,
    status: str,
    block_number: int | None,
    context_tokens: int,
    verbatim_tokens: int,
    checkpoint: Checkpoint | None,
) -> None:
    """After a turn has committed: queue a forced compaction when the oldest
    verbatim block (the first after the checkpoint in force now) has aged a
    whole window, or a compaction when the context has passed the soft
    threshold with history enough to fold (`_worth_folding`). A cancelled
    turn ages history without the window check.

    `checkpoint` is the one the turn started with: a compaction may have
    installed a newer one while it ran. Its window can only be fuller than
    the one in force, so the one in force is read only when it is full.
    Likewise `context_tokens` (counted from `checkpoint`) can only be more
    than the context now: past the threshold, a newer checkpoint means a
    compaction has just judged the context, and none is queued (the next
    turn's end counts from the new one)."""
    if block_number is None:
        return
    if (
        status != TurnStatus.CANCELLED
        and _window_full(checkpoint, block_number)
        and _window_full(current_checkpoint(agent), block_number)
    ):
        compaction_request(agent=agent, reason=CompactionReason.FORCED)
    elif (
        context_tokens > settings.STUDIO["COMPACTION_SOFT_RATIO"] * agent.max_tokens
        and _worth_folding(agent, verbatim_tokens)
        and _still_in_force(agent, checkpoint)
    ):
        compaction_request(agent=agent, reason=CompactionReason.THRESHOLD)


def _worth_folding(agent: Agent, verbatim_tokens: int) -> bool:
    """Whether the history past the checkpoint (`verbatim_tokens`) is at
    least half the KEEP share of maxTokens. It always is when the context
    block leaves that room below the soft threshold; a block that does not
    (open memories near maxOpenTokens, a full summary, a long listing) would
    otherwise have every turn's end queue a compaction, billed, and write a
    checkpoint, each folding one small block. So the soft threshold waits
    for that much new history; a send that would pass maxTokens still waits
    for a compaction first (engine._make_room)."""
    return verbatim_tokens >= settings.STUDIO["COMPACTION_KEEP_RATIO"] * agent.max_tokens / 2


def _still_in_force(agent: Agent, checkpoint: Checkpoint | None) -> bool:
    current = current_checkpoint(agent)
    return (current.pk if current else None) == (checkpoint.pk if checkpoint else None)


def _window_full(checkpoint: Checkpoint | None, block_number: int) -> bool:
    """Whether the oldest verbatim block (the first after `checkpoint`, the
    one in force) has aged a whole window by block `block_number`."""
    oldest_verbatim = (checkpoint.through_block if checkpoint else 0) + 1
    return block_number - oldest_verbatim >= settings.STUDIO["FORCED_CHECKPOINT_BLOCKS"]


def _forced_asked(live: Compaction) -> None:
    """A forced checkpoint asked for while `live` (not a forced one) is live
    is never absorbed by it: a queued one becomes the forced one (it folds
    every block but the newest); a running one has the forced one follow it
    when it ends, if the window is still full then."""
    upgraded = Compaction.objects.filter(pk=live.pk, status=CompactionStatus.QUEUED).update(
        reason=CompactionReason.FORCED
    )
    if not upgraded:
        Compaction.objects.filter(pk=live.pk).update(forced_after=True)


def _forced_follows_on_commit(compaction: Compaction) -> None:
    """Once `compaction` has ended: the forced checkpoint asked for while it
    ran, if its agent's window is still full."""
    if not Compaction.objects.filter(pk=compaction.pk, forced_after=True).exists():
        return

    def follow():
        agent = Agent.objects.filter(pk=compaction.agent_id).first()
        if agent is not None and _window_full(current_checkpoint(agent), agent.last_block):
            compaction_request(agent=agent, reason=CompactionReason.FORCED)

    transaction.on_commit(follow)


def compaction_request(*, agent: Agent, reason: str) -> Compaction:
    """The agent's live compaction, queuing one if there is none. A live one
    whose worker is gone (its lease lapsed) is queued again."""
    for _ in range(3):
        live = _live(agent)
        if live is not None:
            if reason == CompactionReason.FORCED and live.reason != CompactionReason.FORCED:
                _forced_asked(live)
            if live.awaits_credits:
                if not compaction_resume(agent, live) and reason == CompactionReason.MANUAL:
                    _payable_check(agent, live.reason, live)
            else:
                _requeue_if_stale(live)
            return live
        if reason == CompactionReason.MANUAL:
            _payable_check(agent, reason)
        try:
            with transaction.atomic():
                compaction = Compaction.objects.create(
                    agent=agent, reason=reason, lease_until=_lease(), request_id=logs.request_id() or ""
                )
                publish_on_commit(agent.pk, _event(event_types.compaction_queued, compaction))
                _enqueue_on_commit(compaction)
            return compaction
        except IntegrityError:
            # Another process queued one first (look again), or the agent
            # is gone (the next look finds none, and so does the last).
            continue
    if not Agent.objects.filter(pk=agent.pk).exists():
        raise NotFound(f"Agent '{agent.name}' was deleted.", code="agent_not_found")
    raise Unavailable("A compaction could not be queued for a moment; try again.", code="unavailable")


# A queued compaction's lease is how long its task may take to reach a
# worker before it is sent again (workers busy with long compactions delay
# it: not so short that it is sent over and over meanwhile).
LEASE_WINDOW_SECONDS = 60
# A running one's worker renews its lease every third of this while it
# works, so one whose worker died lapses within RUNNING_LEASE_SECONDS, and
# beat's `compactions_lapsed_task` (every few seconds) hands it out again.
RUNNING_LEASE_SECONDS = 15


def _lease_window() -> float:
    return min(LEASE_WINDOW_SECONDS, settings.STUDIO["COMPACTION_LEASE_SECONDS"])


def _running_lease_window() -> float:
    return min(RUNNING_LEASE_SECONDS, settings.STUDIO["COMPACTION_LEASE_SECONDS"])


def _lease():
    return lease_until(_lease_window())


def compaction_resume(agent: Agent, live: Compaction | None = None) -> bool:
    """Send on the agent's compaction that waits for credits, if the game
    can now pay for its model call. True when none waits any more."""
    live = live or _live(agent)
    if live is None or not live.awaits_credits:
        return True
    if not ledger.hold_covered(game_id=agent.game_id, amount=_waiting_cost(agent, live)):
        return False
    with transaction.atomic():
        resumed = Compaction.objects.filter(pk=live.pk, awaits_credits=True).update(
            awaits_credits=False, lease_until=_lease(), error=""
        )
        if resumed:
            live.awaits_credits = False
            _enqueue_on_commit(live)
    return True


def _payable_check(agent: Agent, reason: str, live: Compaction | None = None) -> None:
    """402 `insufficient_credits` when the game cannot pay now for the
    model call a compaction of `agent` would make (`live`: the one that
    waits for credits)."""
    try:
        cost = _waiting_cost(agent, live) if live is not None else _call_cost(agent, reason)
    except Agent.DoesNotExist:
        raise NotFound(f"Agent '{agent.name}' was deleted.", code="agent_not_found") from None
    if not ledger.hold_covered(game_id=agent.game_id, amount=cost):
        raise _cannot_pay(agent, cost)


def _cannot_pay(agent: Agent, cost) -> CompactionAwaitsCredits:
    return CompactionAwaitsCredits(
        f"The game cannot pay for a compaction of agent '{agent.name}': its model call may cost up to "
        f"{ledger.credits_shown(cost)} credits, more than the game has available (its balance less what "
        f"is held) or its monthly cap leaves. {ledger.OPERATORS} can add credits."
    )


def _requeue_if_stale(live: Compaction) -> bool:
    """A live compaction whose lease lapsed — its worker died, or its task
    never reached a broker — is handed out again. True when this call did."""
    if live.lease_until is None or live.lease_until >= timezone.now():
        return False
    updated = Compaction.objects.filter(pk=live.pk, lease_until=live.lease_until).update(
        status=CompactionStatus.QUEUED, lease_until=_lease(), error="Its worker went away; queued again."
    )
    if updated:
        with logs.request_context(live.request_id):
            log.warning("compaction %s: its worker went away (%s); handed out again", live.uuid, live.status)
        _enqueue_on_commit(live)
    return bool(updated)


# Speed: the ORM building this read at every turn's end while an agent's window is full; guarded by bench/paired.py --past-window.
_LIVE = sql.Compiled(
    lambda agent_id: Compaction.objects.filter(
        agent_id=agent_id, status__in=[CompactionStatus.QUEUED, CompactionStatus.RUNNING]
    ).order_by("-id")[:1],
    agent_id=-0x5EED_0003,
)


def _live(agent: Agent) -> Compaction | None:
    live = _LIVE.first(agent_id=agent.pk)
    if live is not None:
        live.agent = agent
    return live


def compaction_wait(
    agent: Agent, compaction: Compaction, *, timeout: float | None = None, on_wake=None
) -> Compaction:
    """Wait (bounded) for `compaction` to finish; returns it as it stands.
    Woken when an attempt ends, holding no database connection meanwhile;
    `on_wake()` runs each time it wakes (a waiting turn renews its lease
    there, and may raise to stop waiting)."""
    give_up = time.monotonic() + (
        timeout if timeout is not None else settings.STUDIO["COMPACTION_WAIT_SECONDS"]
    )
    with wakeups.listening(wakeups.compaction_key(agent.pk)) as waiter:
        while True:
            compaction.refresh_from_db()
            left = give_up - time.monotonic()
            if not compaction.is_live or compaction.awaits_credits or left <= 0:
                return compaction
            waiter.wait(left)
            if on_wake is not None:
                on_wake()


# --- who runs it ---------------------------------------------------------------------

_threads: ThreadPoolExecutor | None = None
_threads_lock = threading.Lock()


def _enqueue_on_commit(compaction: Compaction) -> None:
    runner = settings.STUDIO["COMPACTION_RUNNER"]
    if compaction.agent.replay_of_id is not None:
        # A replay's copy is compacted in its replay's process, which waits
        # for it anyway: a Celery worker running the replay would otherwise
        # wait on a task queued behind itself.
        runner = "inline"
    compaction_id, request_id = str(compaction.uuid), compaction.request_id
    if runner == "celery":
        transaction.on_commit(lambda: _send_task(compaction_id, request_id))
    elif runner == "inline":
        transaction.on_commit(lambda: compaction_run_with_retries(compaction_id))
    elif runner == "thread":
        transaction.on_commit(
            lambda: _thread_pool().submit(logs.carry_log_context(_run_in_thread), compaction_id)
        )
    # "none": queued only; something else runs it (`compaction_run`).


def _send_task(compaction_id: str, request_id: str) -> None:
    """Hand the compaction to Celery, by the task's name (the task's module
    imports this one), under the id of the request that queued it. If the
    broker cannot take it, the compaction stays queued and its lease
    lapses: the next request for one sends it again."""
    try:
        with logs.request_context(request_id):
            celery_app.send_task(
                COMPACTION_TASK, (compaction_id,), queue=settings.CELERY_TASK_DEFAULT_QUEUE, retry=False
            )
    except Exception:
        log.warning(
            "compaction %s could not reach the broker; it will be sent again", compaction_id, exc_info=True
        )


def _thread_pool() -> ThreadPoolExecutor:
    global _threads
    with _threads_lock:
        if _threads is None:
            _threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="compaction")
        return _threads


def _run_in_thread(compaction_id: str) -> None:
    try:
        compaction_run_with_retries(compaction_id)
    except Exception:
        log.exception("compaction %s failed", compaction_id)
    finally:
        connection.close()


def compaction_run_with_retries(compaction_id: str) -> None:
    """Run in this process, trying again with backoff (the thread and
    inline runners; Celery retries its own way)."""
    for attempt in range(settings.STUDIO["COMPACTION_MAX_ATTEMPTS"]):
        try:
            compaction_run(compaction_id)
            return
        except CompactionRetry:
            time.sleep(min(0.2 * 2**attempt, 5))


# --- how -----------------------------------------------------------------------------------


@dataclass
class Plan:
    checkpoint_id: int | None
    previous_summary: str | None
    through: int
    messages: list[dict]
    open_memories: list[dict]
    kind: str


def compaction_run(compaction_id: str) -> Compaction | None:
    """Run one attempt of a compaction. Safe to call again for the same id:
    a finished compaction is left alone. Any failure leaves the previous
    checkpoint in force and the compaction queued for another attempt."""
    compaction = _claim(compaction_id)
    if compaction is None:
        return None
    agent = compaction.agent
    started = time.monotonic()
    reply = None
    with (
        _logged_as(compaction),
        lease_kept(
            Compaction.objects.filter(pk=compaction.pk, status=CompactionStatus.RUNNING),
            _running_lease_window(),
            f"compaction {compaction.uuid}",
        ),
    ):
        try:
            plan = _plan(agent, compaction.reason)
            if plan is not None and not _hold_take(agent, compaction, plan):
                return compaction
            reply = _summarize(agent, plan, held=compaction.held) if plan else None
            _install(agent, compaction, plan, reply)
        except ProviderError as error:
            log.warning("compaction %s: the model call failed: %s", compaction_id, error)
            metrics.model_call_failed(agent.model, error.kind)
            usage = usage_total(
                error.usage or (_sent(agent, plan) if error.reached else None), error.failed_attempts
            )
            _attempt_failed(compaction, f"The compaction's model call failed: {error.public}", usage=usage)
            _attempt_count(compaction, started, "model_error")
            raise _attempt_error(compaction, error) from error
        except Exception as error:  # a database hiccup, a bug: try again, keep nothing half-done
            log.exception("compaction %s: the attempt failed inside the studio", compaction_id)
            # What went wrong is the operator's (a database's address, say): the log has it.
            # Its model call, if it made one, is billed all the same.
            _attempt_failed(
                compaction,
                f"The compaction failed inside the studio ({type(error).__name__}); it is tried again. "
                f"The studio's operators can find the details in its logs under compaction {compaction_id}.",
                usage=_reply_usage(reply),
            )
            _attempt_count(compaction, started, "internal_error")
            raise _attempt_error(compaction, error) from error
    _attempt_count(compaction, started)
    compaction.refresh_from_db()
    return compaction


ATTEMPT_OUTCOMES = {
    CompactionStatus.DONE: "done",
    CompactionStatus.QUEUED: "retried",
    CompactionStatus.FAILED: "failed",
}


@contextmanager
def _logged_as(compaction: Compaction):
    """Lines logged inside carry the compaction's game, agent and id, and
    the id of the request that queued it."""
    agent = compaction.agent
    with (
        logs.request_context(compaction.request_id),
        logs.work_context(game=agent.game.slug, agent=agent.name, compaction=compaction.uuid),
    ):
        yield


def _attempt_count(compaction: Compaction, started: float, code: str = "") -> None:
    """Count an attempt that has ended (its outcome committed): done,
    retried (queued again) or failed for good, with the error code of a
    failed one. Done is logged at INFO, failed for good at WARNING (each
    failed attempt is logged where it failed)."""
    seconds = time.monotonic() - started
    outcome = ATTEMPT_OUTCOMES.get(compaction.status, str(compaction.status))
    metrics.compaction_ended(outcome, code, seconds)
    with _logged_as(compaction):
        if compaction.status == CompactionStatus.DONE:
            folded = (
                f"through block {compaction.checkpoint.through_block}" if compaction.checkpoint else "nothing"
            )
            log.info(
                "compaction %s done (%s, attempt %d): folded %s in %.3f s",
                compaction.uuid,
                compaction.reason,
                compaction.attempts,
                folded,
                seconds,
            )
        elif compaction.status == CompactionStatus.FAILED:
            log.warning(_failed_for_good(compaction))


def _failed_for_good(compaction: Compaction) -> str:
    return f"compaction {compaction.uuid} failed for good after {compaction.attempts} attempts: {compaction.error}"


def _attempt_error(compaction: Compaction, error: Exception) -> CompactionRetry:
    """What a failed attempt raises: CompactionFailed after the last one."""
    if compaction.status == CompactionStatus.FAILED:
        return CompactionFailed(_failed_for_good(compaction))
    return CompactionRetry(str(error))


def _claim(compaction_id: str) -> Compaction | None:
    with transaction.atomic():
        compaction = (
            Compaction.objects.select_for_update(of=("self",))
            .select_related("agent", "agent__game")
            .filter(uuid=compaction_id)
            .first()
        )
        if compaction is None or not compaction.is_live:
            return None
        running = compaction.status == CompactionStatus.RUNNING
        if running and compaction.lease_until and compaction.lease_until >= timezone.now():
            return None  # another worker runs it (this is a redelivered task)
        compaction.status = CompactionStatus.RUNNING
        compaction.attempts += 1
        compaction.started_at = compaction.started_at or timezone.now()
        compaction.lease_until = lease_until(_running_lease_window())
        compaction.save(update_fields=["status", "attempts", "started_at", "lease_until"])
        publish_on_commit(compaction.agent_id, _event(event_types.compaction_started, compaction))
    return compaction


def _attempt_failed(compaction: Compaction, error: str, *, usage: Usage | None = None) -> None:
    """End a failed attempt: queued again, or failed for good after the
    last one. What its model call cost the provider is charged, and its
    hold goes back."""
    final = compaction.attempts >= settings.STUDIO["COMPACTION_MAX_ATTEMPTS"]
    status = CompactionStatus.FAILED if final else CompactionStatus.QUEUED
    with transaction.atomic():
        release = _hold_taken(compaction)
        Compaction.objects.filter(pk=compaction.pk, status=CompactionStatus.RUNNING).update(
            status=status,
            error=error,
            # Still queued: the lease runs on, so a retry that never arrives
            # is sent again by the next request for a compaction.
            lease_until=None if final else _lease(),
            finished_at=timezone.now() if final else None,
        )
        compaction.status, compaction.error = status, error
        # Its call is owed even when another worker ended the compaction
        # meanwhile (or its agent is gone, the hold given back with it).
        _charge(compaction, usage, release)
        if final:
            _forced_follows_on_commit(compaction)
        if final:
            publish_on_commit(compaction.agent_id, _event(event_types.compaction_finished, compaction))
        wakeups.notify_on_commit(wakeups.compaction_key(compaction.agent_id))


def _plan(agent: Agent, reason: str) -> Plan | None:
    """What to fold, or None when there is nothing to do."""
    checkpoint = current_checkpoint(agent)
    through = checkpoint.through_block if checkpoint else 0
    blocks = list(
        Block.objects.filter(agent=agent, number__gt=through, folded=False, status__in=ENDED_STATUSES)
        .order_by("number")
        .values_list("number", "tokens", "entries")
    )
    newest = Agent.objects.values_list("last_block", flat=True).get(pk=agent.pk)
    if reason == CompactionReason.THRESHOLD:
        fold = _oldest_beyond_budget(blocks, keep_tokens=_keep_tokens(agent, checkpoint))
    else:  # forced, manual: every verbatim block but the newest
        fold = [b for b in blocks if b[0] < newest]
    kind = CheckpointKind.FORCED if reason == CompactionReason.FORCED else CheckpointKind.COMPACTION
    if not fold and kind != CheckpointKind.FORCED:
        return None
    open_memories = open_memories_snapshot(agent, with_ids=True)
    messages = [m for _, _, entries in fold for m in entries_to_messages(entries)]
    return Plan(
        checkpoint_id=checkpoint.pk if checkpoint else None,
        previous_summary=checkpoint.summary if checkpoint else None,
        through=fold[-1][0] if fold else through,
        messages=messages,
        open_memories=open_memories,
        kind=kind,
    )


def _keep_tokens(agent: Agent, checkpoint: Checkpoint | None) -> float:
    """What a threshold compaction keeps verbatim: the newest KEEP share of
    maxTokens — less when the context block is large, so the compacted
    context stays at least half of that share below the soft threshold.
    Else a block near the threshold (open memories near maxOpenTokens, a
    full summary) would bring each next turn's end past it again: a
    compaction and a checkpoint written for every turn. The block to come is
    judged by the one in force and the open memories now, beside the
    system prompt and the tools."""
    keep = settings.STUDIO["COMPACTION_KEEP_RATIO"] * agent.max_tokens
    opened = open_tokens(agent) if agent.memory_enabled else 0
    block = max(checkpoint.block_tokens if checkpoint else 0, opened)
    fixed = block + fixed_tokens(agent)
    room = settings.STUDIO["COMPACTION_SOFT_RATIO"] * agent.max_tokens - fixed - keep / 2
    return max(0.0, min(keep, room))


def _oldest_beyond_budget(blocks: list, *, keep_tokens: float) -> list:
    """The oldest blocks, leaving the newest ones whose tokens fit in
    `keep_tokens` (always at least the newest one)."""
    kept, index = 0, len(blocks)
    while index > 0:
        tokens = blocks[index - 1][1]
        if index < len(blocks) and kept + tokens > keep_tokens:
            break
        kept += tokens
        index -= 1
    return blocks[:index]


def _request(agent: Agent, plan: Plan) -> CompactionRequest | None:
    """What the compactor's model call is given — no call under
    sliding-window, nor with nothing new to summarize."""
    if agent.compaction_type == CompactionType.SLIDING_WINDOW or not plan.messages:
        return None
    return CompactionRequest(
        system=agent.system_prompt,
        previous_summary=plan.previous_summary,
        messages=plan.messages,
        open_memories=plan.open_memories,
        summary_max_tokens=int(agent.max_tokens * settings.STUDIO["COMPACTION_SUMMARY_RATIO"]),
        max_open_tokens=agent.max_open_tokens,
    )


def _sent(agent: Agent, plan: Plan | None) -> Usage | None:
    """The tokens a compaction's call sends, counted here (what a provider
    bills when its own count never came): its instructions and prompt,
    with some room for the framing a provider adds."""
    request = _request(agent, plan) if plan else None
    if request is None:
        return None
    counted = count_tokens(COMPACTOR_INSTRUCTIONS) + count_tokens(compaction_prompt(request))
    return Usage(input_tokens=counted + counted // 10 + 8 * len(request.messages) + 256)


def _worst_cost(agent: Agent, plan: Plan | None):
    """The most a compaction's model call can cost: its input as sent, and
    its output limit, at the model's price. 0 with no call to make."""
    sent = _sent(agent, plan)
    if sent is None:
        return ledger.credits(0)
    worst = Usage(
        input_tokens=sent.input_tokens, output_tokens=compaction_output_tokens(_request(agent, plan))
    )
    return ledger.usage_amount(worst, ledger.model_price(agent.model))


def _call_cost(agent: Agent, reason: str):
    """What a compaction's model call can cost, planned now."""
    return _worst_cost(agent, _plan(agent, reason))


# A compaction that waits for credits is asked what it would cost by every
# send of its agent (each refused meanwhile) — planning it reads and counts
# everything it would fold. Nothing it folds changes while it waits (the
# agent plays no turn), so its worst case is kept per process, by the
# compaction and the agent's config revision, for a while.
_WAITING_COSTS: OrderedDict = OrderedDict()
_WAITING_COSTS_KEPT = 256
_WAITING_COST_SECONDS = 60
_WAITING_COSTS_LOCK = threading.Lock()


def _waiting_cost(agent: Agent, live: Compaction):
    """What `live`, waiting for credits, would cost: `_call_cost`, kept."""
    key = (live.pk, agent.revision, agent.model)
    now = time.monotonic()
    with _WAITING_COSTS_LOCK:
        kept = _WAITING_COSTS.get(key)
    if kept is not None and now - kept[0] < _WAITING_COST_SECONDS:
        return kept[1]
    cost = _call_cost(agent, live.reason)
    with _WAITING_COSTS_LOCK:
        _WAITING_COSTS[key] = (now, cost)
        while len(_WAITING_COSTS) > _WAITING_COSTS_KEPT:
            _WAITING_COSTS.popitem(last=False)
    return cost


def _hold_take(agent: Agent, compaction: Compaction, plan: Plan) -> bool:
    """Hold what the planned model call can cost before it is made, within
    the balance and the monthly cap (a hold an earlier attempt left, its
    worker gone, counts towards it). False when the game cannot pay: the
    compaction then waits, queued, holding nothing, and the agent's sends
    are refused until it can go on (`compaction_resume`)."""
    cost = _worst_cost(agent, plan)
    if not cost and not compaction.held:
        return True  # no model call (sliding-window, nothing new), or a free model: nothing to hold
    with transaction.atomic():
        # The compaction's row before the account, as in every attempt's end;
        # what it holds as the row has it (another worker may have changed it).
        had = _held_locked(compaction)
        Compaction.objects.filter(pk=compaction.pk).update(held=cost)
        if ledger.hold_fits(game_id=agent.game_id, amount=cost - had):
            compaction.held = cost
            return True
        transaction.set_rollback(True)
    error = str(_cannot_pay(agent, cost))
    with transaction.atomic():
        release = _hold_taken(compaction)
        Compaction.objects.filter(pk=compaction.pk, status=CompactionStatus.RUNNING).update(
            status=CompactionStatus.QUEUED,
            awaits_credits=True,
            lease_until=None,
            error=error,
            attempts=F("attempts") - 1,  # waiting is not a failed attempt
        )
        compaction.status, compaction.awaits_credits, compaction.error = CompactionStatus.QUEUED, True, error
        _charge(compaction, None, release)
        publish_on_commit(compaction.agent_id, _event(event_types.compaction_queued, compaction))
        wakeups.notify_on_commit(wakeups.compaction_key(compaction.agent_id))
    log.info("compaction %s waits for credits: %s", compaction.uuid, error)
    return False


def compactions_reap(*, game_id: int | None = None) -> bool:
    """Hand out again the live compactions (of the game, or of every game)
    whose worker died, or whose task never reached one (their lease
    lapsed): the next attempt holds anew. True when there were any."""
    stale = Compaction.objects.filter(
        status__in=[CompactionStatus.QUEUED, CompactionStatus.RUNNING],
        awaits_credits=False,
        lease_until__lt=timezone.now(),
    )
    if game_id is not None:
        stale = stale.filter(agent__game_id=game_id)
    found = False
    for live in stale.select_related("agent"):
        found |= _requeue_if_stale(live)
    return found


def _summarize(agent: Agent, plan: Plan, *, held) -> CompactionReply | None:
    """The compactor's model call — none under sliding-window, and none
    with nothing new to summarize. A billed attempt is retried only while
    what the failed ones bill and one more at its worst fit in `held`, the
    compaction's hold (which the game covered): a compaction never spends
    past it. (The next attempt of the compaction holds anew.)"""
    request = _request(agent, plan)
    if request is None:
        return None
    price, worst = ledger.model_price(agent.model), _worst_cost(agent, plan)

    def within(failed: list[Usage]) -> bool:
        return sum((ledger.usage_amount(usage, price) for usage in failed), Decimal(0)) + worst <= held

    request.retry_within = within
    reply = provider_for(agent.model).summarize(request)
    metrics.model_tokens_used(reply.usage)
    # Stored as text: what the database refuses becomes U+FFFD.
    reply.summary = storable(reply.summary)
    reply.rewrites = {storable(name): storable(content) for name, content in reply.rewrites.items()}
    return reply


def _install(agent: Agent, compaction: Compaction, plan: Plan | None, reply: CompactionReply | None) -> None:
    with transaction.atomic():
        # of=("self",): lock the agent row only — not the game row the join
        # reaches, which a send's commit checks (that deadlocked).
        agent = Agent.objects.select_for_update(of=("self",)).select_related("game").get(pk=agent.pk)
        current = current_checkpoint(agent)
        release = _hold_taken(compaction)
        if plan is None or (current.pk if current else None) != plan.checkpoint_id:
            # Nothing to fold, or another run installed a checkpoint since
            # this plan was read: stand down rather than fold twice (its
            # model call, if it made one, is owed all the same).
            _finish(compaction, checkpoint=None)
            _charge(compaction, _reply_usage(reply), release)
            return
        shown = {m["name"]: m for m in plan.open_memories}
        for name, content in (reply.rewrites if reply else {}).items():
            if name in shown:
                memory_rewrite_by_compactor(
                    agent=agent,
                    name=name,
                    memory_id=shown[name]["id"],
                    version_read=shown[name]["version"],
                    content=content,
                )
        checkpoint = _checkpoint_write(agent, plan, reply)
        # The rewrites just kept (applied or dropped) belong to it.
        MemoryEvent.objects.filter(
            agent=agent, by=Writer.COMPACTOR, block=checkpoint.from_block, checkpoint=None
        ).update(checkpoint=checkpoint)
        Block.objects.filter(agent=agent, number__lte=plan.through, folded=False).update(folded=True)
        _finish(compaction, checkpoint=checkpoint)
        # Last: the charge locks the game's account row until the commit.
        _charge(compaction, _reply_usage(reply), release)


def _reply_usage(reply: CompactionReply | None) -> Usage | None:
    """What the compactor's call is billed: its usage, and the attempts
    before it that the provider could bill (a retry followed each)."""
    return usage_total(reply.usage, reply.failed_attempts) if reply else None


def _hold_taken(compaction: Compaction) -> Decimal:
    """The compaction's hold as its row has it, cleared there: what an
    attempt's end gives back. Under the row's lock, so however many workers
    end attempts of it (one whose lease lapsed mid-call, and the one that
    took it over), the hold goes back once."""
    held = _held_locked(compaction)
    if held:
        Compaction.objects.filter(pk=compaction.pk).update(held=0)
    compaction.held = ledger.credits(0)
    return held


def _held_locked(compaction: Compaction) -> Decimal:
    """What the compaction's row holds, the row locked until the commit."""
    held = (
        Compaction.objects.select_for_update(of=("self",))
        .filter(pk=compaction.pk)
        .values_list("held", flat=True)
        .first()
    )
    return held or Decimal(0)


def _charge(compaction: Compaction, usage: Usage | None, release: Decimal) -> None:
    """Charge an attempt's model call (if it made one) and give back
    `release` of the game's holds (`_hold_taken`): inside the caller's
    transaction, last."""
    agent = compaction.agent
    if usage is not None or release:
        ledger.charge_compaction(
            game_id=agent.game_id,
            agent_name=agent.name,
            compaction_id=compaction.uuid,
            model=agent.model,
            usage=usage,
            release=release,
        )


def _checkpoint_write(agent: Agent, plan: Plan, reply: CompactionReply | None) -> Checkpoint:
    if agent.compaction_type == CompactionType.SLIDING_WINDOW:
        summary = None
    else:
        summary = reply.summary if reply else plan.previous_summary
    return checkpoint_write(agent=agent, kind=plan.kind, through_block=plan.through, summary=summary)


def checkpoint_write(*, agent: Agent, kind: str, through_block: int, summary: str | None) -> Checkpoint:
    """Write a checkpoint from the store as it stands: open memories in
    full, closed ones by description (as many as the listing's budget
    takes), the context block rendered from them. Call inside the
    transaction that installs it, under the agent's lock."""
    closed_memories, closed_unlisted = closed_listing(agent)
    fields = checkpoint_fields(
        summary=summary,
        open_memories=open_memories_snapshot(agent),
        closed_memories=closed_memories,
        closed_unlisted=closed_unlisted,
    )
    checkpoint = Checkpoint.objects.create(
        agent=agent, kind=kind, through_block=through_block, from_block=agent.change_block(), **fields
    )
    publish_on_commit(
        agent.pk,
        event_types.checkpoint_written(
            agent=agent.name, kind=checkpoint.kind, through_block=checkpoint.through_block
        ),
    )
    return checkpoint


def _finish(compaction: Compaction, *, checkpoint: Checkpoint | None) -> None:
    Compaction.objects.filter(pk=compaction.pk).update(
        status=CompactionStatus.DONE,
        checkpoint=checkpoint,
        lease_until=None,
        finished_at=timezone.now(),
        error="",
    )
    compaction.status, compaction.checkpoint = CompactionStatus.DONE, checkpoint
    publish_on_commit(compaction.agent_id, _event(event_types.compaction_finished, compaction))
    wakeups.notify_on_commit(wakeups.compaction_key(compaction.agent_id))
    _forced_follows_on_commit(compaction)


def _event(build, compaction: Compaction) -> dict:
    """`compaction` as a `compaction.*` event, made by `build`."""
    return build(
        agent=compaction.agent.name,
        compaction_id=str(compaction.uuid),
        reason=compaction.reason,
        status=compaction.status,
        error=compaction.error or None,
        waiting_for_credits=compaction.awaits_credits,
        through_block=compaction.checkpoint.through_block if compaction.checkpoint else None,
    )
