"""Replays: an agent's real play, played again against a changed definition.

A replay takes the player's messages of blocks N..M of an agent and sends
them, in order, to a copy of the agent as it stood when block N−1 ended (a
fork: its store, checkpoint and verbatim history, `imports.replay_copy_make`)
whose definition has the replay's changes. Each is a real send
(`engine.send`): memory tools, compactions, forced checkpoints, holds, 402
and the game's quotas behave as on any agent, and every turn is charged to
the game. Two things a player's pace gave the original are given to the
copy too: where a designer compacted the original by hand between those
blocks, the copy is compacted at the same place; and before each send the
copy's compaction, if one runs, is waited for. So with no changes and a
deterministic model the copy says and remembers exactly what the original
did.

The copy is no character of the game (`Agent.replay_of`): the agents list
leaves it out, and it takes no send but its replay's; while the replay
lives, its blocks, checkpoints and context can be looked at, by its name.
But it is an agent of the game while it lives, in the game's agent quota
(a game with no room for it is refused the replay, 403 `quota_exceeded`).
It goes once the replay ends — completed, failed or cancelled — or is
deleted: what the replay's page reads of it (its side of each block
played, its store as the last of them left it, what it was charged) is
kept on the replay, and the rest (the history it was copied with, its
checkpoints, revisions and memory changes) is deleted with it. A copy
whose model calls are still to be charged when its replay ends stays
until they are: the periodic sweep and `manage.py prune` remove it then.
The original is only read.

A replay runs in the background where compactions run
(STUDIO_COMPACTION_RUNNER: a Celery worker, a thread of this process, or
inline after commit), one at a time per agent, and can be cancelled. Its
progress reaches the original's listeners as `replay.progress`, its end
as `replay.finished`. What it shows, side by side, is `selectors`'.
"""

import json
import logging
import threading
import uuid
from collections import Counter, deque

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents import compaction
from agents.history.as_of import baseline_entry, block_at, store_at
from agents.history.imports import replay_copy_document, replay_copy_make
from agents.models import (
    COPY_MARK,
    LIVE_REPLAY_STATUSES,
    LIVE_STATUSES,
    Agent,
    Block,
    Compaction,
    CompactionReason,
    CompactionStatus,
    DefinedVia,
    Replay,
    ReplayStatus,
    Turn,
    TurnStatus,
)
from agents.provenance import Definer
from agents.selectors import replay_costs
from agents.sending import engine, turn_slot
from agents.services import (
    agent_define,
    agent_room_check,
    definition_check,
    definition_from_config,
    definition_paced,
    replay_copy_check,
)
from agents.wire import config_wire, replay_kept_row
from billing import ledger
from memories.tools import MEMORY_TOOLS
from studio.celery import app as celery_app
from studio.errors import Conflict, DomainError, NotFound
from studio.live import event_types
from studio.live.events import publish, publish_on_commit
from studio.ops import logs
from studio.runtime.leases import lease_kept, lease_until
from studio.serving import lifecycle
from studio.tokens import count_tokens

log = logging.getLogger(__name__)

# The Celery task that runs one replay (`agents.tasks`).
REPLAY_TASK = "agents.tasks.replay_task"
# The most blocks one replay plays.
REPLAY_MAX_BLOCKS = 50
# A replay being played renews its lease (a third of it at a time); one
# waiting for a worker (queued, or between blocks on Celery) has the
# longer lease. A replay task is not delivered again when its worker dies
# (it is not acks_late): a replay whose lease lapsed is ended as failed by
# the periodic sweep (`replays_lapsed_end`), or first by another replay of
# its agent asked for before it.
LEASE_WINDOW_SECONDS = 60
QUEUED_LEASE_SECONDS = 600


# --- starting one ---------------------------------------------------------------------------


def replay_start(*, agent: Agent, from_block: int, through: int | None, changes: dict) -> Replay:
    """Queue a replay of `agent`'s blocks `from_block`..`through` (None: its
    newest ended block) with `changes` to its definition (any of a
    definition's keys, in its wire shape: each given replaces that part of
    the agent's config as it is now). The copy is made here, so what would
    stop the replay from starting is answered now."""
    replay_copy_check(agent, then="Replay the agent it replays.")
    replays_lapsed_end(agent=agent)
    if Replay.objects.filter(agent=agent, status__in=LIVE_REPLAY_STATUSES).exists():
        raise _running(agent)
    through = _blocks_check(agent, from_block, through)
    config = _config_changed(agent, changes)
    # Before the history is read: a game with no room for the copy is
    # refused without that cost (`replay_copy_make` checks again, locked).
    agent_room_check(agent.game, lock=False, for_replay=True)
    # A copy writes an agent's history and revisions, as a fork does: paced
    # with the game's definitions, so starting and cancelling replays in a
    # loop cannot fill the database.
    definition_paced(agent.game, doing="starting replays")
    key = uuid.uuid4()
    document = replay_copy_document(agent=agent, at_block=from_block - 1, config=config)
    try:
        with transaction.atomic():
            copy = replay_copy_make(agent=agent, name=copy_name(agent, key), document=document)
            replay = Replay.objects.create(
                uuid=key,
                agent=agent,
                replay_agent=copy,
                replay_agent_name=copy.name,
                from_block=from_block,
                through_block=through,
                changes=changes,
                config=config,
                lease_until=_lease(QUEUED_LEASE_SECONDS),
                request_id=logs.request_id() or "",
            )
            _enqueue_on_commit(replay)
    except IntegrityError:  # another replay of the agent was queued meanwhile
        raise _running(agent) from None
    return replay


def copy_name(agent: Agent, key: uuid.UUID) -> str:
    """The copy's name: the agent's, marked with `~`, which no definition's
    name may hold — so it never takes a name a designer could want."""
    return f"{agent.name[:45]}{COPY_MARK}replay-{key.hex[:10]}"


def _running(agent: Agent) -> Conflict:
    return Conflict(
        f"Agent '{agent.name}' has a replay queued or running; a replay runs one at a time per agent. "
        "Wait for it to end, or cancel it.",
        code="replay_running",
    )


def newest_ended_block(agent: Agent) -> int:
    """The agent's newest block that has ended (0: none)."""
    last = Agent.objects.values_list("last_block", flat=True).get(pk=agent.pk)
    running = Block.objects.filter(agent=agent, number=last, status=TurnStatus.RUNNING).exists()
    return last - 1 if running else last


def _blocks_check(agent: Agent, from_block: int, through: int | None) -> int:
    """The replay's last block: `through`, or the newest ended one — once
    both ends are blocks that can be looked at, in order, at most
    REPLAY_MAX_BLOCKS apart."""
    block_at(agent, from_block)
    through = newest_ended_block(agent) if through is None else through
    if through < from_block:
        raise _bad("through", f"must not be before fromBlock ({from_block}).")
    if through - from_block + 1 > REPLAY_MAX_BLOCKS:
        raise _bad(
            "through",
            f"makes {through - from_block + 1} blocks; a replay plays {REPLAY_MAX_BLOCKS} at most, so "
            f"through {from_block + REPLAY_MAX_BLOCKS - 1} at most from block {from_block}.",
        )
    block_at(agent, through)
    return through


def _bad(field: str, message: str) -> DomainError:
    return DomainError(f"{field}: {message}", details=[{"field": field, "message": message}])


def _config_changed(agent: Agent, changes: dict) -> dict:
    """The agent's config as it is now with `changes`, checked as a
    definition is; in its wire shape."""
    config = {**config_wire(agent), **changes}
    definition = definition_from_config(config)
    definition_check(definition, system_tokens=count_tokens(definition.system_prompt))
    return config


def _lease(seconds: float = LEASE_WINDOW_SECONDS):
    return lease_until(seconds)


def replays_lapsed_end(*, agent: Agent | None = None) -> int:
    """End as failed the live replays (of `agent`, or of every agent) whose
    lease lapsed: the process playing them, or the worker they waited for,
    is gone. Each only if its lease is still lapsed as it ends (a process
    that took it up meanwhile keeps it). How many ended."""
    now = timezone.now()
    lapsed = Replay.objects.filter(status__in=LIVE_REPLAY_STATUSES, lease_until__lt=now).select_related(
        "agent"
    )
    if agent is not None:
        lapsed = lapsed.filter(agent=agent)
    ended = 0
    for replay in lapsed:
        if _end(
            replay, ReplayStatus.FAILED, error=_GONE, code="process_stopped", was=replay.status, lapsed_by=now
        ):
            log.warning("replay %s ended failed (process_stopped): %s", replay.uuid, _GONE)
            ended += 1
    return ended


_GONE = "The process running this replay stopped (or no worker took it up); it was given up."


# --- who runs it -------------------------------------------------------------------------------


def _enqueue_on_commit(replay: Replay) -> None:
    """Run the replay where compactions run (STUDIO_COMPACTION_RUNNER)."""
    runner = settings.STUDIO["COMPACTION_RUNNER"]
    replay_id, request_id = str(replay.uuid), replay.request_id
    if runner == "celery":
        transaction.on_commit(lambda: _send_task(replay_id, request_id))
    elif runner == "inline":
        transaction.on_commit(lambda: replay_run(replay_id))
    elif runner == "thread":
        transaction.on_commit(lambda: _thread_start(replay_id))
    # "none": queued only; something else runs it (`replay_run`).


def _send_task(replay_id: str, request_id: str) -> None:
    """Hand the replay to Celery by the task's name, under the id of the
    request that asked for it. If the broker cannot take it, it stays
    queued until its lease lapses (or it is cancelled)."""
    try:
        with logs.request_context(request_id):
            celery_app.send_task(
                REPLAY_TASK, (replay_id,), queue=settings.CELERY_TASK_DEFAULT_QUEUE, retry=False
            )
    except Exception:
        log.warning("replay %s could not reach the broker", replay_id, exc_info=True)


def _thread_start(replay_id: str) -> None:
    # A thread of its own, not the compactions' pool: a replay waits on
    # the compactions its sends ask for.
    threading.Thread(
        target=logs.carry_log_context(_run_in_thread),
        args=(replay_id,),
        name=f"replay-{replay_id}",
        daemon=True,
    ).start()


def _run_in_thread(replay_id: str) -> None:
    try:
        with lifecycle.working():  # a process that drains waits for it
            replay_run(replay_id)
    except Exception:
        log.exception("replay %s failed", replay_id)
    finally:
        connection.close()


# --- running it -----------------------------------------------------------------------------


def replay_run(replay_id: str, *, one_block: bool = False) -> Replay | None:
    """Play a replay: to its end, or with `one_block` (on a Celery worker)
    its next block only, the rest queued as the next task — so a worker
    takes other tasks (every game's compactions) between a replay's blocks.
    A replay another process plays now, or that has ended, is left alone
    (None). One whose process died (its lease lapsed) is taken up where
    it stopped."""
    replay = _claim(replay_id)
    if replay is None:
        return None
    more = False
    with (
        logs.request_context(replay.request_id),
        logs.work_context(game=replay.agent.game.slug, agent=replay.agent.name),
        lease_kept(
            Replay.objects.filter(pk=replay.pk, status=ReplayStatus.RUNNING),
            LEASE_WINDOW_SECONDS,
            f"replay {replay.uuid}",
        ),
    ):
        try:
            more = _play(replay, one_block=one_block)
        except DomainError as refused:  # a send refused: 402, the game's quota, the agent gone…
            _end(replay, ReplayStatus.FAILED, error=refused.message, code=refused.code)
        except Exception:
            log.exception("replay %s: it stopped on an error inside the studio", replay_id)
            _end(
                replay,
                ReplayStatus.FAILED,
                error=f"The replay stopped on an error inside the studio; the studio's operators can find "
                f"the details in its logs under replay {replay_id}.",
                code="internal_error",
            )
    if more:
        with transaction.atomic():
            Replay.objects.filter(pk=replay.pk, status=ReplayStatus.RUNNING).update(
                is_playing=False, lease_until=_lease(QUEUED_LEASE_SECONDS)
            )
            transaction.on_commit(lambda: _send_task(replay_id, replay.request_id))
    replay.refresh_from_db()
    return replay


def _claim(replay_id: str) -> Replay | None:
    """Take the replay up: a live one no process is playing (or whose
    process is gone)."""
    now = timezone.now()
    claimed = (
        Replay.objects.filter(uuid=replay_id, status__in=LIVE_REPLAY_STATUSES)
        .filter(Q(is_playing=False) | Q(lease_until__lt=now))
        .update(
            status=ReplayStatus.RUNNING,
            is_playing=True,
            started_at=Coalesce("started_at", Value(now)),
            lease_until=_lease(),
        )
    )
    if not claimed:
        return None
    replay = Replay.objects.select_related("agent__game", "replay_agent").get(uuid=replay_id)
    replay.replay_agent.game = replay.agent.game
    return replay


def _play(replay: Replay, *, one_block: bool) -> bool:
    """Play the replay's next blocks (one, with `one_block`); True when
    some are left to play. Which block is next is read from the copy: a
    block a dead process left half-played counts as played (it ended
    failed), and play goes on after it."""
    copy = replay.replay_agent
    turn_slot.turns_end_dead(agent_id=copy.pk)
    messages = _messages(replay)
    compactions = _hand_compactions(replay)
    while True:
        number = Agent.objects.values_list("last_block", flat=True).get(pk=copy.pk) + 1
        _played(replay, number - replay.from_block)
        if number > replay.through_block:
            for _ in range(compactions[number]):
                _compact(copy)
            _end(replay, ReplayStatus.COMPLETED)
            return False
        if _cancel_asked(replay):
            _end(replay, ReplayStatus.CANCELLED)
            return False
        for _ in range(compactions[number]):
            _compact(copy)
        _compaction_wait(copy)
        if number not in messages:
            raise DomainError(
                f"Block {number} of agent '{replay.agent.name}' is no longer kept (retention pruned it), so "
                "its message cannot be played.",
                code="history_pruned",
            )
        answers = _original_answers(replay, number)
        sent = engine.send(agent=copy, content=messages[number], replaying=True, answers=answers)
        if not sent.turn.has_ended:
            _waiting_copy_end(replay, sent.turn)
        _played(replay, number - replay.from_block + 1)
        publish(
            replay.agent_id,
            event_types.replay_progress(
                agent=replay.agent.name,
                replay_id=str(replay.uuid),
                block=number,
                played=replay.played,
                total=replay.total,
            ),
        )
        if sent.turn.status == TurnStatus.CANCELLED and _cancel_asked(replay):
            _end(replay, ReplayStatus.CANCELLED)
            return False
        if one_block:
            return True


class OriginalAnswers:
    """What the game answered the original's calls of its tools in one
    block, to answer the copy's with (`engine.send`'s `answers`): a call
    of the same tool with the same arguments (as canonical JSON) gets the
    result recorded for it — repeats in the order they were made. A call
    the original never made, or made fewer times, gets an error the model
    reads, and its entry is marked `notInOriginal`."""

    def __init__(self, entries: list[dict]):
        self.recorded: dict[tuple[str, str], deque] = {}
        for entry in entries:
            if entry.get("type") == "tool_call" and entry["name"] not in MEMORY_TOOLS:
                key = (entry["name"], _canonical(entry["arguments"]))
                self.recorded.setdefault(key, deque()).append((entry["result"], entry["isError"]))

    def __call__(self, name: str, arguments) -> dict:
        recorded = self.recorded.get((name, _canonical(arguments)))
        if recorded:
            result, is_error = recorded.popleft()
            return {"result": result, "isError": is_error}
        return {"result": NOT_IN_ORIGINAL.format(name=name), "isError": True, "notInOriginal": True}


NOT_IN_ORIGINAL = (
    "Not answered in the original: in the play this replays, the game never answered a {name} call "
    "with these arguments at this point, so there is no answer to give. Go on without it."
)


def _canonical(arguments) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _original_answers(replay: Replay, number: int) -> OriginalAnswers:
    """The game's answers in the original's block `number`."""
    entries = (
        Block.objects.filter(agent_id=replay.agent_id, number=number)
        .values_list("entries", flat=True)
        .first()
    )
    return OriginalAnswers(entries or [])


def _waiting_copy_end(replay: Replay, turn: Turn) -> None:
    """A copy's turn never waits for the game (its calls are answered from
    the original): should one, it is ended, and the replay with it, rather
    than the replay going on — or ending — with its copy's turn waiting."""
    try:
        turn_slot.turn_cancel(turn)
    except DomainError:  # it ended meanwhile
        pass
    raise DomainError(
        f"The replay's turn of block {turn.block_number} waited for the game, which a replay never asks; "
        "it was ended, and the replay with it.",
        code="internal_error",
    )


def _played(replay: Replay, played: int) -> None:
    if played != replay.played:
        replay.played = played
        Replay.objects.filter(pk=replay.pk).update(played=played)


def _messages(replay: Replay) -> dict[int, str]:
    """The player's message of each of the replayed blocks, by number."""
    blocks = Block.objects.filter(
        agent_id=replay.agent_id, number__range=(replay.from_block, replay.through_block)
    ).values_list("number", "entries")
    return {number: entries[0]["content"] for number, entries in blocks if entries}


def _hand_compactions(replay: Replay) -> Counter:
    """Where a designer compacted the original by hand (a manual
    compaction that wrote a checkpoint) among the replayed blocks: how many
    times before the block of each number (`through_block` + 1: after the
    last). One that took force at block N ran before it when block N was
    given its checkpoint, else while block N ran — after it, for the copy."""
    made = Compaction.objects.filter(
        agent_id=replay.agent_id,
        reason=CompactionReason.MANUAL,
        checkpoint__from_block__range=(replay.from_block, replay.through_block),
    ).values_list("checkpoint_id", "checkpoint__from_block")
    given = dict(
        Block.objects.filter(
            agent_id=replay.agent_id, number__range=(replay.from_block, replay.through_block)
        ).values_list("number", "checkpoint_id")
    )
    return Counter(at if given.get(at) == checkpoint else at + 1 for checkpoint, at in made)


def _compact(copy: Agent) -> None:
    pending = compaction.compaction_request(agent=copy, reason=CompactionReason.MANUAL)
    compaction.compaction_wait(copy, pending)


def _compaction_wait(copy: Agent) -> None:
    """Wait (bounded) for the copy's compaction, if one is live."""
    live = (
        Compaction.objects.filter(agent=copy, status__in=[CompactionStatus.QUEUED, CompactionStatus.RUNNING])
        .order_by("-id")
        .first()
    )
    if live is not None and not live.awaits_credits:
        compaction.compaction_wait(copy, live)


def _cancel_asked(replay: Replay) -> bool:
    return Replay.objects.filter(pk=replay.pk, cancel_requested=True).exists()


def _end(
    replay: Replay,
    status: str,
    *,
    error: str = "",
    code: str = "",
    was: str = ReplayStatus.RUNNING,
    lapsed_by=None,
) -> bool:
    """End the replay (if it is still `was`, and with `lapsed_by` if its
    lease still lapsed before then) and tell the original's listeners.
    Whether it ended here."""
    still = Replay.objects.filter(pk=replay.pk, status=was)
    if lapsed_by is not None:
        still = still.filter(lease_until__lt=lapsed_by)
    with transaction.atomic():
        ended = still.update(
            status=status,
            error=error,
            error_code=code,
            ended_at=timezone.now(),
            lease_until=None,
            is_playing=False,
        )
        if ended:
            replay.status = status
            event = event_types.replay_finished(
                agent=replay.agent.name, replay_id=str(replay.uuid), status=status
            )
            publish_on_commit(replay.agent_id, event)
            replay_id = replay.pk
            transaction.on_commit(lambda: replay_copy_remove(replay_id), robust=True)
    return bool(ended)


# --- cancelling it, using its definition ----------------------------------------------------------


def replay_cancel(replay: Replay) -> Replay:
    """Stop a live replay. One no process is playing now (queued, between
    two blocks on a worker, or whose process is gone) ends at once; one
    being played ends once its copy's current turn, cancelled too, has
    ended. The blocks played so far stay, to be compared."""
    with transaction.atomic():
        locked = Replay.objects.select_for_update().get(pk=replay.pk)
        if not locked.is_live:
            raise Conflict(f"Replay {locked.uuid} has already ended ({locked.status}).", code="replay_ended")
        gone = locked.lease_until is not None and locked.lease_until < timezone.now()
        if not locked.is_playing or gone:
            locked.agent = replay.agent
            _end(locked, ReplayStatus.CANCELLED, was=locked.status)
        else:
            locked.cancel_requested = True
            locked.save(update_fields=["cancel_requested"])
    if locked.status == ReplayStatus.RUNNING:
        for turn in Turn.objects.filter(agent_id=locked.replay_agent_id, status__in=LIVE_STATUSES):
            try:
                turn_slot.turn_cancel(turn)
            except DomainError:  # it ended meanwhile
                pass
    locked.refresh_from_db()
    return locked


def replay_definition_use(replay: Replay, *, by: Definer) -> Agent:
    """Define the replayed agent with the definition its replay played
    (its copy's config) — the designer's "Use this definition", recorded
    as `by`'s. As any redefinition: config only; history, checkpoint and
    memories are untouched."""
    definition = definition_from_config(replay.config)
    agent, _ = agent_define(
        game=replay.agent.game,
        name=replay.agent.name,
        definition=definition,
        by=by,
        via=DefinedVia.REPLAY,
        note=f"The definition replay {replay.uuid} played (blocks {replay.from_block}–{replay.through_block})",
    )
    return agent


# --- what a replay leaves: its rows, and no copy ---------------------------------------------


def replay_copy_remove(replay_id: int) -> bool:
    """Remove the copy of an ended replay, keeping on the replay what its
    page reads of it (`Replay.kept`). False when there is none to remove,
    or not yet: the replay is live, or a model call of the copy's is still
    to be charged (a cancelled turn's, a compaction's) — the sweep comes
    back for it."""
    copy_id = Replay.objects.filter(pk=replay_id).values_list("replay_agent_id", flat=True).first()
    if copy_id is None:
        return False
    with transaction.atomic():
        # The replay before its copy, as deleting the agent it replays takes them.
        replay = (
            Replay.objects.select_for_update(of=("self",))
            .select_related("agent")
            .filter(pk=replay_id, replay_agent_id=copy_id)
            .exclude(status__in=LIVE_REPLAY_STATUSES)
            .first()
        )
        copy = Agent.objects.select_for_update().filter(pk=copy_id).first() if replay else None
        if copy is None or _copy_owes(copy):
            return False
        replay.kept = _kept(replay, copy)
        replay.replay_agent = None
        replay.save(update_fields=["kept", "replay_agent"])
        copy.delete()
    return True


def replay_copies_remove() -> int:
    """Remove the copies ended replays still have (their model calls
    charged since); how many went."""
    ended = Replay.objects.filter(replay_agent__isnull=False).exclude(status__in=LIVE_REPLAY_STATUSES)
    return sum(replay_copy_remove(pk) for pk in list(ended.values_list("pk", flat=True)))


def _copy_owes(copy: Agent) -> bool:
    """Whether the copy has a turn still live or a model call still to be
    charged. Under the copy's lock: its dead turns are ended on the way
    (`live_head`), and its live compactions held, so none starts meanwhile
    (a queued one that holds nothing goes with the copy)."""
    if turn_slot.live_head(copy) is not None:
        return True
    if Turn.objects.filter(agent=copy, open_call_tokens__isnull=False).exists():
        return True
    live = Compaction.objects.select_for_update().filter(
        agent=copy, status__in=[CompactionStatus.QUEUED, CompactionStatus.RUNNING]
    )
    held = Compaction.objects.filter(agent=copy, held__gt=0)
    return any(c.status == CompactionStatus.RUNNING for c in live) or held.exists()


def _kept(replay: Replay, copy: Agent) -> dict:
    """What the replay's page reads of its copy: its side of each block
    played, its store as the last of them left it, what it was charged.
    With none played, no store: the copy's was the original's as of the
    block before the first (`selectors.replay_store` reads it there)."""
    blocks = Block.objects.filter(agent=copy, number__range=(replay.from_block, replay.through_block))
    blocks = list(blocks.select_related("turn"))
    lines = ledger.lines_by_turn(block.turn.uuid for block in blocks if block.turn)
    kept = {
        "rows": {str(block.number): replay_kept_row(block, lines) for block in blocks},
        "cost": str(replay_costs(replay.agent, [replay]).get(replay.replay_agent_name, 0)),
        "store": None,
        "storeRefused": None,
    }
    if replay.played == 0:
        return kept
    try:
        kept["store"] = [baseline_entry(m) for m in store_at(copy, replay.from_block - 1 + replay.played)]
    except DomainError as refused:
        kept["storeRefused"] = {"code": refused.code, "message": refused.message}
    return kept


def replay_delete(replay: Replay) -> None:
    """Delete an ended replay, with its copy if it still has one — 409
    while it is live, or while a model call of its copy's is still to be
    charged."""
    with transaction.atomic():
        locked = Replay.objects.select_for_update().filter(pk=replay.pk).first()
        if locked is None:
            raise NotFound(
                f"Agent '{replay.agent.name}' has no replay '{replay.uuid}'.", code="replay_not_found"
            )
        if locked.is_live:
            raise Conflict(
                f"Replay {locked.uuid} is {locked.status}; cancel it (POST …/replays/{locked.uuid}/cancel) or "
                "wait for it to end, then delete it.",
                code="replay_running",
            )
        copy = Agent.objects.select_for_update().filter(pk=locked.replay_agent_id).first()
        if copy is not None and _copy_owes(copy):
            raise Conflict(
                f"Replay {locked.uuid}'s copy has a model call still running (a cancelled turn's or a "
                "compaction's) that is yet to be charged; try again in a minute.",
                code="agent_busy",
            )
        if copy is not None:
            copy.delete()
        locked.delete()
