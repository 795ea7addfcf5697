"""Retention: deleting what the studio keeps no longer (`manage.py prune`).

Each kind has its setting (`STUDIO_RETAIN_*`, in days; 0 keeps it for good):

- Idempotency keys: a turn's key is cleared once its 24 hours are up
  (`turn_slot.IDEMPOTENCY_WINDOW`, the promise), so the unique index holds
  only keys a repeat may still use. Always.
- Sessions: Django's, once expired. Always.
- Replays' copies: an ended replay's copy goes when the replay ends, but
  for one whose model calls were still to be charged then (the sweep
  removes it once they are, and so does a prune). Always.
- Ended replays (RETAIN_REPLAYS_DAYS): those that ended longer ago than
  that, with what they kept of their copies (once their copy is gone).
- Folded history (RETAIN_HISTORY_DAYS): an agent's folded blocks older
  than that, with their turns; `Agent.history_pruned_through` says how far.
  A checkpoint that folds less than that is emptied (the row, and so every
  checkpoint's number, stays), but for the newest such, which the oldest
  one kept whole is compared with.
- Memory changes (RETAIN_MEMORY_CHANGES_DAYS): those made in folded blocks
  older than that; a `StoreBaseline` keeps the store they left, so the
  store as of every later block is still their replay.
- Turns (RETAIN_TURNS_DAYS): ended turns that never played a block
  (transient sends, sends that ended before they started).
- Config revisions (KEEP_REVISIONS, a count): an agent's revisions but
  its newest KEEP_REVISIONS and those a block was played with (or a
  running turn was given: its block records it when it ends) —
  `selectors.revisions_past`. A definition that writes a revision deletes
  them at once too (`services.revisions_bound`); a prune finds those a
  block or a turn held then.
- Budget records (RETAIN_REFUSALS_DAYS, RETAIN_ALERT_DELIVERIES_DAYS, 30
  days each, never kept for good): refused sends' daily counts, and alert
  deliveries that are done.
- Cost lines (RETAIN_COST_LINES_DAYS): lines older than that whose turn is
  gone, and compactions' lines; their sum is carried forward on the game's
  account (`ledger.cost_lines_prune`), so the ledger still balances. A kept
  turn keeps its lines: its cost is never shown short.

What time travel can no longer show is refused with 409 `history_pruned`
(`as_of`). Safe while the studio serves, and beside another prune:
a horizon moves first, in one statement (readers refuse what is behind it
from then on), and what is behind it is then deleted BATCH rows at a time,
each batch a short transaction of its own that skips rows another prune
holds. The store kept in place of memory changes moves on STEP_CHANGES
changes at a time (straight past blocks with none), and only from where it
stands (a conditional write): a prune that finds it moved meanwhile reads
it again.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import import_module
from itertools import groupby

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from agents.history.as_of import baseline_entry, baseline_memory, store_replay
from agents.models import (
    ENDED_STATUSES,
    LIVE_REPLAY_STATUSES,
    Agent,
    AgentRevision,
    Block,
    Checkpoint,
    Replay,
    Turn,
)
from agents.replays import replay_copies_remove
from agents.selectors import revisions_past
from agents.sending.turn_slot import IDEMPOTENCY_WINDOW
from billing import ledger
from billing.models import AlertDelivery, CostLine, DeliveryStatus, Refusal
from memories.models import MemoryEvent, StoreBaseline
from studio.ops.jobs import job_ran

# Rows one transaction deletes (or clears) at most.
BATCH = 500
# Memory changes one move of a kept store replays (more only when one
# block holds more): each move writes the whole store, so it moves by
# changes, not by blocks, and a long run of blocks with none costs one write.
STEP_CHANGES = 5_000


@dataclass
class Found:
    """One kind's rows past keeping: deleted, or with `dry_run` only counted.
    `bytes`: about how much space they take (PostgreSQL only); `value`:
    its setting's (days, or for revisions how many), None for a kind that
    has no setting; 0 keeps it for good."""

    kind: str
    setting: str | None
    value: int | None
    rows: int = 0
    bytes: int | None = None

    @property
    def is_kept(self) -> bool:
        return self.value == 0


def prune(*, dry_run: bool = False, now: datetime | None = None) -> list[Found]:
    """Delete (or, `dry_run`, count) what each kind's setting says is past
    keeping, as of `now`. Cost lines go first, so a dry run counts what a
    run deletes: the lines of turns pruned now go at the next run."""
    now = now or timezone.now()
    found = [
        _idempotency_keys(now, dry_run),
        _sessions(now, dry_run),
        _replay_copies(dry_run),
        _replays(now, dry_run),
        _cost_lines(now, dry_run),
    ]
    history = [
        Found("blocks", "STUDIO_RETAIN_HISTORY_DAYS", _days("RETAIN_HISTORY_DAYS")),
        Found("turns of pruned blocks", "STUDIO_RETAIN_HISTORY_DAYS", _days("RETAIN_HISTORY_DAYS")),
        Found("checkpoints emptied", "STUDIO_RETAIN_HISTORY_DAYS", _days("RETAIN_HISTORY_DAYS")),
        Found("memory changes", "STUDIO_RETAIN_MEMORY_CHANGES_DAYS", _days("RETAIN_MEMORY_CHANGES_DAYS")),
    ]
    # A row's size is read before any goes (a table's size shrinks later, if ever).
    per_row = [_table_bytes_per_row(model) for model in (Block, Turn, Checkpoint, MemoryEvent)]
    if not all(kind.is_kept for kind in history):
        for agent_id in _agent_ids():
            _agent_prune(agent_id, history, now, dry_run)
    for kind, size in zip(history, per_row, strict=True):
        kind.bytes = _about(kind.rows, size)
    budget = [_refusals(now, dry_run), _alert_deliveries(now, dry_run)]
    found = [*found, *history, _revisions(now, dry_run), _turns_without_block(now, dry_run), *budget]
    if not dry_run:
        job_ran("prune")  # the dead man's switch an operator alerts on (studio/ops/jobs.py)
    return found


def _days(key: str) -> int:
    return settings.STUDIO[key]


def _cutoff(days: int, now: datetime) -> datetime:
    return now - timedelta(days=days)


def _agent_ids() -> Iterator[int]:
    after = 0
    while ids := list(Agent.objects.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:BATCH]):
        yield from ids
        after = ids[-1]


# --- batches ----------------------------------------------------------------------------


def in_batches(rows, act: Callable[[list[int]], object]) -> int:
    """Call `act` with the ids of `rows`, BATCH at a time in id order, each
    batch in a transaction of its own that holds its rows (rows another
    prune holds are skipped: they are its to act on). How many it acted on."""
    done, after = 0, 0
    while True:
        with transaction.atomic():
            held = rows.filter(pk__gt=after).order_by("pk").select_for_update(skip_locked=True, of=("self",))
            ids = list(held.values_list("pk", flat=True)[:BATCH])
            if not ids:
                return done
            act(ids)
        done, after = done + len(ids), ids[-1]


def _delete(model) -> Callable[[list[int]], object]:
    return lambda ids: model.objects.filter(pk__in=ids).delete()


# --- what every studio prunes: idempotency keys, sessions ----------------------------------


def _idempotency_keys(now: datetime, dry_run: bool) -> Found:
    """Keys whose window is up: a repeat would start a new send anyway."""
    rows = Turn.objects.filter(idempotency_key__isnull=False, created_at__lt=now - IDEMPOTENCY_WINDOW)
    found = Found("idempotency keys", None, None, rows=rows.count())
    found.bytes = _about(
        found.rows,
        _columns_bytes(rows, "pg_column_size(t.idempotency_key) + pg_column_size(t.request_digest)"),
    )
    if not dry_run:
        found.rows = in_batches(
            rows, lambda ids: Turn.objects.filter(pk__in=ids).update(idempotency_key=None, request_digest="")
        )
    return found


def _sessions(now: datetime, dry_run: bool) -> Found:
    """Expired sessions (Django's `clearsessions`, in batches where they
    are rows)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    found = Found("expired sessions", None, None)
    if not hasattr(store, "get_model_class"):  # not kept in the database
        if not dry_run:
            store.clear_expired()
        return found
    model = store.get_model_class()
    rows = model.objects.filter(expire_date__lt=now)
    found.rows = rows.count()
    found.bytes = _about(found.rows, _table_bytes_per_row(model))
    if not dry_run:
        found.rows = in_batches(rows, _delete(model))
    return found


# --- replays' copies ---------------------------------------------------------------------


def _replay_copies(dry_run: bool) -> Found:
    """The copies ended replays still have (their replays keep what their
    pages show); about how much space: their blocks'."""
    copies = Agent.objects.filter(replay__isnull=False).exclude(replay__status__in=LIVE_REPLAY_STATUSES)
    found = Found("replay copies", None, None, rows=copies.count())
    found.bytes = _about(Block.objects.filter(agent__in=copies).count(), _table_bytes_per_row(Block))
    if not dry_run:
        found.rows = replay_copies_remove()
    return found


def _replays(now: datetime, dry_run: bool) -> Found:
    """Replays that ended before the cutoff, with the rows and the store
    they kept; one whose copy still owes a model call waits for it (the
    copies above go first)."""
    days = _days("RETAIN_REPLAYS_DAYS")
    found = Found("ended replays", "STUDIO_RETAIN_REPLAYS_DAYS", days)
    if found.is_kept:
        return found
    rows = Replay.objects.exclude(status__in=LIVE_REPLAY_STATUSES).filter(
        ended_at__lt=_cutoff(days, now), replay_agent__isnull=True
    )
    found.rows = rows.count()
    found.bytes = _about(found.rows, _table_bytes_per_row(Replay))
    if not dry_run:
        found.rows = in_batches(rows, _delete(Replay))
    return found


# --- cost lines ---------------------------------------------------------------------------


def _cost_lines(now: datetime, dry_run: bool) -> Found:
    """Lines past keeping that no kept turn shows: a pruned turn's, a
    deleted agent's, a compaction's."""
    days = _days("RETAIN_COST_LINES_DAYS")
    found = Found("cost lines", "STUDIO_RETAIN_COST_LINES_DAYS", days)
    if found.is_kept:
        return found
    turn_gone = ~Exists(Turn.objects.filter(uuid=OuterRef("turn_id")))
    rows = CostLine.objects.filter(Q(turn_id=None) | turn_gone, created_at__lt=_cutoff(days, now))
    found.rows = rows.count()
    found.bytes = _about(found.rows, _table_bytes_per_row(CostLine))
    if not dry_run:
        found.rows = _cost_lines_delete(rows)
    return found


def _cost_lines_delete(rows) -> int:
    """Each game's lines among `rows`, carried forward by the ledger."""
    done, after = 0, 0
    while batch := list(rows.filter(pk__gt=after).order_by("pk").values_list("game_id", "pk")[:BATCH]):
        after = batch[-1][1]
        for game_id, lines in groupby(sorted(batch), key=lambda line: line[0]):
            done += ledger.cost_lines_prune(game_id=game_id, line_ids=[pk for _, pk in lines])
    return done


# --- budget records: refused sends' counts, alert deliveries ----------------------------------


def _refusals(now: datetime, dry_run: bool) -> Found:
    """Days of refused sends' counts older than the setting (always bounded)."""
    days = _days("RETAIN_REFUSALS_DAYS")
    rows = Refusal.objects.filter(last_at__lt=_cutoff(days, now))
    return _deleted(Found("refusal counts", "STUDIO_RETAIN_REFUSALS_DAYS", days), rows, Refusal, dry_run)


def _alert_deliveries(now: datetime, dry_run: bool) -> Found:
    """Alert deliveries made before the setting's days, once they are done."""
    days = _days("RETAIN_ALERT_DELIVERIES_DAYS")
    rows = AlertDelivery.objects.filter(created_at__lt=_cutoff(days, now)).exclude(
        status=DeliveryStatus.PENDING
    )
    found = Found("alert deliveries", "STUDIO_RETAIN_ALERT_DELIVERIES_DAYS", days)
    return _deleted(found, rows, AlertDelivery, dry_run)


def _deleted(found: Found, rows, model, dry_run: bool) -> Found:
    found.rows = rows.count()
    found.bytes = _about(found.rows, _table_bytes_per_row(model))
    if not dry_run:
        found.rows = in_batches(rows, _delete(model))
    return found


# --- an agent's history -------------------------------------------------------------------


def _agent_prune(agent_id: int, found: list[Found], now: datetime, dry_run: bool) -> None:
    blocks, turns, checkpoints, changes = found
    # Read before any block goes: the changes' horizon is a block's too.
    changes_through = 0 if changes.is_kept else _changes_target(agent_id, _cutoff(changes.value, now))
    if not blocks.is_kept:
        through = _history_through(agent_id, _cutoff(blocks.value, now), now, dry_run)
        rows = Block.objects.filter(agent_id=agent_id, number__lte=through)
        emptied = _checkpoints_past(agent_id, through)
        if dry_run:
            blocks.rows += rows.count()
            turns.rows += rows.exclude(turn=None).count()
            checkpoints.rows += emptied.count()
        else:
            _blocks_delete(rows, blocks, turns)
            checkpoints.rows += in_batches(emptied, _checkpoints_empty(now))
    if not changes.is_kept:
        changes.rows += _memory_changes(agent_id, changes_through, now, dry_run)


def _folded_through(agent_id: int) -> int:
    """The newest block the agent's checkpoint in force folds (0: none)."""
    through = (
        Checkpoint.objects.filter(agent_id=agent_id)
        .order_by("-id")
        .values_list("through_block", flat=True)
        .first()
    )
    return through or 0


def folded_before(agent_id: int, cutoff: datetime) -> int:
    """The newest folded block of the agent played before `cutoff` (0: none)."""
    newest = (
        Block.objects.filter(
            agent_id=agent_id, number__lte=_folded_through(agent_id), folded=True, created_at__lt=cutoff
        )
        .order_by("-number")
        .values_list("number", flat=True)
        .first()
    )
    return newest or 0


def changed_before(agent_id: int, cutoff: datetime) -> int:
    """The newest folded block of the agent with a memory change made
    before `cutoff` (0: none). Read from the changes, which may outlive
    their blocks."""
    newest = (
        MemoryEvent.objects.filter(
            agent_id=agent_id, block__lte=_folded_through(agent_id), created_at__lt=cutoff
        )
        .order_by("-block")
        .values_list("block", flat=True)
        .first()
    )
    return newest or 0


def _history_through(agent_id: int, cutoff: datetime, now: datetime, dry_run: bool) -> int:
    """How far the agent's history is pruned once its horizon has moved to
    `folded_before` the cutoff (it never moves back)."""
    target = folded_before(agent_id, cutoff)
    if not dry_run:
        Agent.objects.filter(pk=agent_id, history_pruned_through__lt=target).update(
            history_pruned_through=target, history_pruned_at=now
        )
    through = Agent.objects.filter(pk=agent_id).values_list("history_pruned_through", flat=True).first()
    return max(through or 0, target)


def _blocks_delete(rows, blocks: Found, turns: Found) -> None:
    """The blocks, with their turns (a turn whose model call is still to be
    charged holds credits: its block waits for it)."""

    def delete(ids):
        turn_ids = list(Block.objects.filter(pk__in=ids).exclude(turn=None).values_list("turn_id", flat=True))
        Block.objects.filter(pk__in=ids).delete()
        turns.rows += Turn.objects.filter(pk__in=turn_ids).delete()[0]

    blocks.rows += in_batches(rows.exclude(turn__open_call_tokens__isnull=False), delete)


def _checkpoints_past(agent_id: int, through: int):
    """The checkpoints that fold less than the pruned history, but the
    newest of them (the oldest one kept whole is compared with it)."""
    base = (
        Checkpoint.objects.filter(agent_id=agent_id, through_block__lt=through)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    return Checkpoint.objects.filter(agent_id=agent_id, id__lt=base or 0, pruned_at=None)


def _checkpoints_empty(now: datetime) -> Callable[[list[int]], object]:
    return lambda ids: Checkpoint.objects.filter(pk__in=ids).update(
        summary=None, open_memories=[], closed_memories=[], context_block="", pruned_at=now
    )


# --- an agent's memory changes ---------------------------------------------------------------


def _changes_target(agent_id: int, cutoff: datetime) -> int:
    """How far the agent's memory changes are past keeping: through the
    newest folded block played before `cutoff` — or, where the blocks are
    gone, the newest with a change made before it."""
    return max(folded_before(agent_id, cutoff), changed_before(agent_id, cutoff))


def _memory_changes(agent_id: int, target: int, now: datetime, dry_run: bool) -> int:
    """Move the store kept for the agent on to block `target`, then delete
    the changes it holds; how many."""
    if not dry_run:
        _baseline_move(agent_id, target, now)
    kept = (
        StoreBaseline.objects.filter(agent_id=agent_id).values_list("through_block", flat=True).first() or 0
    )
    # Only what a kept store holds goes (a dry run counts what will).
    through = max(target, kept) if dry_run else kept
    if not through:
        return 0
    rows = MemoryEvent.objects.filter(Q(block__lte=through) | Q(block=None), agent_id=agent_id)
    return rows.count() if dry_run else in_batches(rows, _delete(MemoryEvent))


def _baseline_move(agent_id: int, target: int, now: datetime) -> None:
    """Replay the changes after the kept store onto it, STEP_CHANGES at a
    time, until it is the store as of block `target`. The changes it
    replays are never written again (their blocks have ended) and are
    deleted only once a store past them is kept, so a step that finds the
    store where it left it may move it."""
    while True:
        baseline = StoreBaseline.objects.filter(agent_id=agent_id).first()
        done = baseline.through_block if baseline else 0
        if done >= target:
            return
        step = _step_end(agent_id, done, target)
        if baseline is None:
            changes = MemoryEvent.objects.filter(Q(block__lte=step) | Q(block=None), agent_id=agent_id)
        else:
            changes = MemoryEvent.objects.filter(agent_id=agent_id, block__gt=done, block__lte=step)
        start = [baseline_memory(entry) for entry in baseline.memories] if baseline else []
        store = [baseline_entry(memory) for memory in store_replay(changes.order_by("id"), start)]
        if baseline is not None:
            StoreBaseline.objects.filter(pk=baseline.pk, through_block=done).update(
                through_block=step, memories=store, pruned_at=now
            )
            continue
        try:
            with transaction.atomic():
                StoreBaseline.objects.create(
                    agent_id=agent_id, through_block=step, memories=store, pruned_at=now
                )
        except IntegrityError:
            pass  # another prune kept one first: read it


def _step_end(agent_id: int, done: int, target: int) -> int:
    """The block a move from `done` stops at: before the block of the
    change past the first STEP_CHANGES after it (through that block, when
    it is the first), or `target`."""
    later = MemoryEvent.objects.filter(agent_id=agent_id, block__gt=done, block__lte=target)
    past = later.order_by("block").values_list("block", flat=True)[STEP_CHANGES : STEP_CHANGES + 1]
    if not past:
        return target
    return past[0] - 1 if past[0] - 1 > done else past[0]


# --- config revisions ------------------------------------------------------------------------


def _revisions(now: datetime, dry_run: bool) -> Found:
    keep = _days("KEEP_REVISIONS")
    found = Found("config revisions", "STUDIO_KEEP_REVISIONS", keep)
    if found.is_kept:
        return found
    size = _table_bytes_per_row(AgentRevision)
    many = (
        AgentRevision.objects.values("agent_id")
        .annotate(count=Count("pk"))
        .filter(count__gt=keep)
        .values_list("agent_id", flat=True)
    )
    for agent_id in many:
        rows = revisions_past(agent_id, keep)
        found.rows += rows.count() if dry_run else in_batches(rows, _delete(AgentRevision))
    found.bytes = _about(found.rows, size)
    return found


# --- turns that never played a block -------------------------------------------------------------


def _turns_without_block(now: datetime, dry_run: bool) -> Found:
    days = _days("RETAIN_TURNS_DAYS")
    found = Found("turns without a block", "STUDIO_RETAIN_TURNS_DAYS", days)
    if found.is_kept:
        return found
    rows = Turn.objects.filter(
        block_number=None, status__in=ENDED_STATUSES, open_call_tokens=None, created_at__lt=_cutoff(days, now)
    )
    found.rows = rows.count()
    found.bytes = _about(found.rows, _table_bytes_per_row(Turn))
    if not dry_run:
        found.rows = in_batches(rows, _delete(Turn))
    return found


# --- about how much space --------------------------------------------------------------------
# PostgreSQL's own figures: a table's size (its TOAST and indexes with it)
# over its rows for rows deleted whole; for values cleared from rows that
# stay, their size in a sample of those rows.

SAMPLE = 1000


def _about(rows: int, per_row: float | None) -> int | None:
    return None if per_row is None else round(rows * per_row)


def _table_bytes_per_row(model) -> float | None:
    if connection.vendor != "postgresql":
        return None
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_total_relation_size(c.oid), c.reltuples FROM pg_class c WHERE c.oid = %s::regclass",
            [table],
        )
        size, estimate = cursor.fetchone()
        if estimate <= 0:  # not analyzed yet
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            estimate = cursor.fetchone()[0]
    return size / estimate if estimate else 0.0


def _columns_bytes(rows, expression: str) -> float | None:
    """The mean of `expression` (over `t`, a row of `rows`) in a sample of them."""
    if connection.vendor != "postgresql":
        return None
    sample, params = rows.order_by().values("pk")[:SAMPLE].query.sql_with_params()
    table = connection.ops.quote_name(rows.model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT avg({expression}) FROM {table} t WHERE t.id IN ({sample})", params)
        mean = cursor.fetchone()[0]
    return float(mean or 0)
