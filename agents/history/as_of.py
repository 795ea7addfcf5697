"""Reads as of a block: which block, the store and the context as they
stood when it ended, and a memory's history. Checkpoints through time are
`checkpoints`, diffs `diffs`, the agent file `export`.

When a thing happened is kept as a block number: a memory change and a
checkpoint carry the first block whose end shows them
(`Agent.change_block`), and each block the config revision and checkpoint
its first model call was given. So the store as of block N is every change
up to N replayed, in order. Blocks before `Agent.recorded_from_block` were
played before the studio kept those numbers, and are refused with 409
`history_not_recorded` rather than shown wrong. What retention pruned
(`agents.history.retention`) is refused the same way, with 409 `history_pruned`:
blocks through `Agent.history_pruned_through`, and the memory changes
through the block a `StoreBaseline` keeps the store as of. Each read looks
at those horizons and what they guard in one snapshot (`one_moment`), so a
prune running meanwhile never makes it answer half of each. Nothing here
writes.
"""

import bisect
import functools
import sys
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Count, Max, Q, QuerySet

from agents.models import Agent, AgentRevision, Block, Checkpoint, TurnStatus
from agents.sending.context import NotRecorded, context_at_block
from agents.wire import checkpoint_brief, context_wire, event_wire
from memories.models import Change, Memory, MemoryEvent, StoreBaseline
from memories.selectors import MEMORIES, memory_wire
from memories.store import memory_bytes, store_cap_bytes
from studio.errors import Conflict, NotFound
from studio.http.lists import Keyset, Page
from studio.text import unstorable_reason
from studio.tokens import count_tokens

# The lists these reads answer, paged as every list is (studio.http.lists).
EVENTS = Keyset("events", order="id", default_limit=200)

# --- what was pruned ----------------------------------------------------------------------


class HistoryPruned(Conflict):
    code = "history_pruned"


@dataclass(frozen=True)
class Kept:
    """How much of an agent's past retention left: every block after
    `blocks` (pruned at `blocks_at`), and the memory changes after the
    block `baseline` keeps the store as of."""

    blocks: int = 0
    blocks_at: datetime | None = None
    baseline: StoreBaseline | None = None

    @property
    def changes(self) -> int:
        return self.baseline.through_block if self.baseline else 0

    @property
    def through(self) -> int:
        """The newest block whose moment can no longer be shown."""
        return max(self.blocks, self.changes)

    def history_pruned(self) -> str:
        return f"its history through block {self.blocks} was pruned on {pruned_day(self.blocks_at)}"

    def changes_pruned(self) -> str:
        return (
            f"the memory changes of its blocks through {self.changes} were pruned on "
            f"{pruned_day(self.baseline.pruned_at)}"
        )

    def pruned(self) -> str:
        """What was pruned, and when: the newer horizon's sentence."""
        return self.history_pruned() if self.blocks >= self.changes else self.changes_pruned()

    def store(self) -> list[Memory]:
        """The store as of block `changes`, which the later changes replay onto."""
        return [baseline_memory(entry) for entry in self.baseline.memories] if self.baseline else []


def pruned_day(moment: datetime | None) -> str:
    return f"{moment:%Y-%m-%d}" if moment else "an earlier day"


def kept(agent: Agent, *, with_store: bool = False) -> Kept:
    """The agent's horizons as they stand (in the caller's snapshot); its
    store as of the newer one only `with_store`."""
    blocks, blocks_at = Agent.objects.values_list("history_pruned_through", "history_pruned_at").get(
        pk=agent.pk
    )
    baselines = StoreBaseline.objects.filter(agent_id=agent.pk)
    baseline = (baselines if with_store else baselines.defer("memories")).first()
    return Kept(blocks, blocks_at, baseline)


@contextmanager
def one_moment():
    """A transaction whose reads all see the same moment (on PostgreSQL,
    repeatable read; a SQLite transaction reads one snapshot already)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield


def baseline_entry(memory: Memory) -> dict:
    """A memory as a `StoreBaseline` keeps it."""
    return {
        "id": memory.pk,
        "name": memory.name,
        "description": memory.description,
        "content": memory.content,
        "open": memory.is_open,
        "version": memory.version,
        "updatedAt": memory.updated_at.isoformat() if memory.updated_at else None,
        "updatedBy": memory.updated_by,
    }


def baseline_memory(entry: dict) -> Memory:
    updated_at = datetime.fromisoformat(entry["updatedAt"]) if entry["updatedAt"] else None
    return Memory(
        pk=entry["id"],
        name=entry["name"],
        description=entry["description"],
        content=entry["content"],
        is_open=entry["open"],
        version=entry["version"],
        updated_at=updated_at,
        updated_by=entry["updatedBy"],
    )


# --- which block -----------------------------------------------------------------------


def block_at(agent: Agent, number: int, horizon: Kept | None = None) -> Block:
    """Block `number` of the agent, ended, recorded and kept — or a 404 or
    409 saying why it cannot be looked at."""
    horizon = kept(agent) if horizon is None else horizon
    if 0 < number <= horizon.through:
        raise HistoryPruned(
            f"Block {number} of agent '{agent.name}' can no longer be looked at or forked: "
            f"{horizon.pruned()}. Blocks from {horizon.through + 1} on can."
        )
    block = Block.objects.filter(agent=agent, number=number).select_related("checkpoint").first()
    if block is None:
        blocks = f"its blocks are 1–{agent.last_block}" if agent.last_block else "it has no blocks yet"
        raise NotFound(f"Agent '{agent.name}' has no block {number}: {blocks}.", code="block_not_found")
    if block.status == TurnStatus.RUNNING:
        raise Conflict(
            f"Block {number} of agent '{agent.name}' is still being played; ask again once its turn has ended.",
            code="block_running",
        )
    if number < agent.recorded_from_block:
        raise NotRecorded(
            f"Block {number} of agent '{agent.name}' was played before the studio kept when each change "
            f"happened, so the store and context as of it are not known; blocks from "
            f"{agent.recorded_from_block} on can be looked at and forked."
        )
    return block


def _revision(agent: Agent, number: int | None):
    """The config revision `number`, or the agent's config when it was not kept."""
    return AgentRevision.objects.filter(agent=agent, number=number).first() or agent


# --- the store ---------------------------------------------------------------------------


def changes_through(agent: Agent, number: int, horizon: Kept | None = None):
    """The memory changes shown at the end of block `number`, in the order
    they were made (with those kept before blocks were recorded) — after
    the store `horizon` keeps, when it keeps one."""
    if horizon is not None and horizon.baseline is not None:
        return MemoryEvent.objects.filter(agent=agent, block__gt=horizon.changes, block__lte=number).order_by(
            "id"
        )
    return MemoryEvent.objects.filter(Q(block__lte=number) | Q(block=None), agent=agent).order_by("id")


def store_replay(events, start: list[Memory] = ()) -> list[Memory]:
    """The store the changes leave, as unsaved memories in the order they
    were made: each change's `after` is the memory as it left it (an open
    or a close, what it changed of it). A
    memory's `pk` is the id of the change that made it. `start`: the store
    the changes are made to (by default, none)."""
    return [_memory(fields) for fields in _replayed(events, start)]


# What a replay reads of each change: not its `before`, and no model made
# of it (a store of thousands of memories is that many changes at least).
_REPLAYED = ("pk", "name", "change", "after", "created_at", "by")


def _replayed(events, start: list[Memory] = ()) -> list[dict]:
    """`store_replay`'s memories as the fields of each: `events` a query
    of changes (read as rows) or the changes themselves."""
    rows = (
        events.values_list(*_REPLAYED)
        if isinstance(events, QuerySet)
        else ((e.pk, e.name, e.change, e.after, e.created_at, e.by) for e in events)
    )
    store: dict[str, dict] = {memory.name: _fields(memory) for memory in start}
    for pk, name, change, after, created_at, by in rows:
        if change == Change.DROPPED:
            continue  # nothing changed
        if after is None:
            store.pop(name, None)
            continue
        memory = store.get(name)
        if memory is None:
            memory = store[name] = {**_new_memory(), "pk": pk, "name": name}
        # An open or a close keeps only what it changed (`store.open_state`).
        memory["description"] = after.get("description", memory["description"])
        memory["content"] = after.get("content", memory["content"])
        memory["is_open"] = after["open"]
        memory["version"] = after.get("version", memory["version"])
        if change in (Change.CREATED, Change.UPDATED, Change.IMPORTED):
            memory["updated_at"], memory["updated_by"] = created_at, by
    return list(store.values())


@functools.cache
def _new_memory() -> dict:
    """A memory's fields before its first change: the model's defaults."""
    return _fields(Memory())


def _fields(memory: Memory) -> dict:
    return {
        "pk": memory.pk,
        "name": memory.name,
        "description": memory.description,
        "content": memory.content,
        "is_open": memory.is_open,
        "version": memory.version,
        "updated_at": memory.updated_at,
        "updated_by": memory.updated_by,
    }


def _memory(fields: dict) -> Memory:
    memory = Memory(**fields)
    memory.tokens = count_tokens(memory.content)
    memory.bytes = memory_bytes(memory.name, memory.description, memory.content)
    return memory


def store_at(agent: Agent, number: int) -> list[Memory]:
    """The store as it stood when block `number` ended, as unsaved
    memories (0: before the first block, when nothing was written yet) —
    or a 404 or 409 saying why that block cannot be looked at."""
    if number == 0:
        return []
    with one_moment():
        horizon = kept(agent, with_store=True)
        block_at(agent, number, horizon)
        return store_replay(changes_through(agent, number, horizon), start=horizon.store())


def memories_at_block(
    agent: Agent, number: int, *, after: int | None = None, limit: int = MEMORIES.default_limit
) -> dict:
    """The store as it stood when block `number` ended, in the memories
    list's shape and pages; `maxOpenTokens` is the one the block was
    played with."""
    with one_moment():
        horizon = kept(agent)
        block = block_at(agent, number, horizon)
        store = _replays.store(agent, number, horizon)
    memories = store.memories
    start = 0 if after is None else bisect.bisect_right(store.keys, after)
    shown = memories[start : start + limit + 1]
    next_key = shown[limit - 1]["pk"] if len(shown) > limit else None
    # A page's memories made whole (models, tokens); the store's totals from its fields.
    items = [memory_wire(_memory(memory)) for memory in shown[:limit]]
    page = Page(items=items, next_key=next_key, keyset=MEMORIES)
    revision = _revision(agent, block.revision)
    return {
        **page.body(),
        "memoryEnabled": revision.memory_enabled,
        "openTokens": store.open_tokens,
        "storeBytes": store.store_bytes,
        "maxOpenTokens": revision.max_open_tokens,
        "storeCapBytes": store_cap_bytes(),
    }


@dataclass(frozen=True)
class _Store:
    """A store replayed as of a block: its memories' fields in the order
    they were made (their ids', which the pages follow), and its totals."""

    memories: list[dict]
    keys: list[int]
    open_tokens: int
    store_bytes: int

    @classmethod
    def of(cls, memories: list[dict]) -> "_Store":
        memories = sorted(memories, key=lambda memory: memory["pk"])
        return cls(
            memories,
            [memory["pk"] for memory in memories],
            sum(count_tokens(memory["content"]) for memory in memories if memory["is_open"]),
            sum(memory_bytes(m["name"], m["description"], m["content"]) for m in memories),
        )


class _Replays:
    """Stores replayed as of a block, kept per process: paging through one
    replays its changes once, not once per page (a steered model can leave
    100,000 small memories under the store cap). A replay is kept under what
    it was made of — the agent (its id and when it was made: SQLite may give
    a deleted agent's id to a new one), the block, the store retention kept
    and the changes replayed onto it (how many, the newest) — so a change or
    a prune since makes another key, read fresh. The least recently used go
    first past `most_bytes`."""

    # Speed: a replay of every change per page of the store as of a block; guarded by bench/time_pages.py (CPU to page through a store as of a block).
    def __init__(self, most_bytes: int = 32 * 1024 * 1024):
        self.most_bytes = most_bytes
        self.lock = threading.Lock()
        self.kept: OrderedDict[tuple, tuple[_Store, int]] = OrderedDict()
        self.bytes = 0

    def store(self, agent: Agent, number: int, horizon: Kept) -> _Store:
        """The store as of block `number` (in the caller's snapshot)."""
        changes = changes_through(agent, number, horizon)
        made_of = changes.aggregate(count=Count("pk"), newest=Max("pk"))
        baseline = horizon.baseline
        key = (
            agent.pk,
            agent.created_at,
            number,
            (baseline.pk, baseline.through_block) if baseline else None,
            made_of["count"],
            made_of["newest"],
        )
        with self.lock:
            found = self.kept.get(key)
            if found is not None:
                self.kept.move_to_end(key)
                return found[0]
        store = _Store.of(_replayed(changes, start=horizon.store()))
        self._keep(key, store)
        return store

    def _keep(self, key: tuple, store: _Store) -> None:
        # What it holds in this process: its texts as Python keeps them (up to
        # 4 bytes a character), and ~400 bytes a memory (its dict, id, stamp, key).
        size = sum(
            sys.getsizeof(m["name"]) + sys.getsizeof(m["description"]) + sys.getsizeof(m["content"]) + 400
            for m in store.memories
        )
        if size > self.most_bytes:
            return
        with self.lock:
            if key in self.kept:
                return
            self.kept[key] = (store, size)
            self.bytes += size
            while self.bytes > self.most_bytes:
                _, (_, gone) = self.kept.popitem(last=False)
                self.bytes -= gone


_replays = _Replays()


def memory_history_page(agent: Agent, name: str, *, after: int | None, limit: int) -> Page:
    """The changes of memory `name`, oldest first — a deleted memory's too."""
    if unstorable_reason(name) is not None:  # a name no memory can have (a NUL): not looked up
        raise _never_had(agent, name)
    numbers = checkpoint_numbers(agent)
    events = MemoryEvent.objects.filter(agent=agent, name=name)
    page = EVENTS.page(
        events, after=after, limit=limit, wire=lambda rows: [event_wire(e, numbers) for e in rows]
    )
    if not page.items and after is None:
        horizon = kept(agent)
        if horizon.changes:
            raise HistoryPruned(
                f"Agent '{agent.name}' keeps no change of a memory named '{name[:80]}': "
                f"{horizon.changes_pruned()}, and any it had were among them."
            )
        raise _never_had(agent, name)
    return page


def _never_had(agent: Agent, name: str) -> NotFound:
    return NotFound(
        f"Agent '{agent.name}' has never had a memory named '{name[:80]}'.", code="memory_not_found"
    )


# --- the context -----------------------------------------------------------------------------


def context_at(agent: Agent, number: int) -> dict:
    """What block `number`'s first model call was given, with the
    checkpoint in force then."""
    with one_moment():
        horizon = kept(agent)
        block = block_at(agent, number, horizon)
        context = context_of_block(agent, block, horizon)
    checkpoint = context.checkpoint
    ref = None
    if checkpoint is not None:
        ref = checkpoint_brief(
            checkpoint, Checkpoint.objects.filter(agent=agent, id__lte=checkpoint.pk).count()
        )
    return {"block": number, **context_wire(context), "checkpoint": ref}


def context_of_block(agent: Agent, block: Block, horizon: Kept | None = None):
    """What `block`'s first model call was given (`context.context_at_block`)
    — unless some of the blocks it was given verbatim were pruned."""
    horizon = kept(agent) if horizon is None else horizon
    checkpoint = block.checkpoint
    if (checkpoint.through_block if checkpoint else 0) < horizon.blocks:
        given = (
            f"the blocks after block {checkpoint.through_block}" if checkpoint else "every block before it"
        )
        raise HistoryPruned(
            f"What block {block.number} of agent '{agent.name}' was given can no longer be shown: it was "
            f"given {given} verbatim, and {horizon.history_pruned()}."
        )
    return context_at_block(agent, block)


def checkpoint_numbers(agent: Agent) -> dict[int, int]:
    """Each checkpoint's number by its database id."""
    ids = Checkpoint.objects.filter(agent=agent).order_by("id").values_list("id", flat=True)
    return {pk: number for number, pk in enumerate(ids, 1)}
