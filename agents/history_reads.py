"""Reads through time: the store, the context and the checkpoints as of a
block, a memory's history, and the agent file an export writes.

When a thing happened is kept as a block number: a memory change and a
checkpoint carry the first block whose end shows them
(`Agent.change_block`), and each block the config revision and checkpoint
its first model call was given. So the store as of block N is every change
up to N replayed, in order. Blocks before `Agent.recorded_from_block` were
played before the studio kept those numbers, and are refused with 409
`history_not_recorded` rather than shown wrong. What retention pruned
(`agents.retention`) is refused the same way, with 409 `history_pruned`:
blocks through `Agent.history_pruned_through`, and the memory changes
through the block a `StoreBaseline` keeps the store as of. Each read looks
at those horizons and what they guard in one snapshot (`one_moment`), so a
prune running meanwhile never makes it answer half of each. Nothing here
writes.
"""

import difflib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from itertools import islice

from django.db import connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from memories.models import Change, Memory, MemoryEvent, StoreBaseline
from memories.selectors import MEMORIES, memory_wire
from memories.store import memory_bytes, store_cap_bytes
from studio.errors import Conflict, NotFound
from studio.lists import Keyset, Page
from studio.tokens import count_tokens

from .context import NotRecorded, context_at_block
from .models import Agent, AgentRevision, Block, Checkpoint, Turn, TurnStatus
from .selectors import block_wire, config_wire, context_wire, turn_reply

FORMAT = "studio.agent"
VERSION = 1

# The lists these reads answer, paged as every list is (studio.lists).
EVENTS = Keyset("events", order="id", default_limit=200)
CHECKPOINTS = Keyset("checkpoints", order="-id", default_limit=50)

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
        return f"its history through block {self.blocks} was pruned on {_day(self.blocks_at)}"

    def changes_pruned(self) -> str:
        return (
            f"the memory changes of its blocks through {self.changes} were pruned on "
            f"{_day(self.baseline.pruned_at)}"
        )

    def pruned(self) -> str:
        """What was pruned, and when: the newer horizon's sentence."""
        return self.history_pruned() if self.blocks >= self.changes else self.changes_pruned()

    def store(self) -> list[Memory]:
        """The store as of block `changes`, which the later changes replay onto."""
        return [baseline_memory(entry) for entry in self.baseline.memories] if self.baseline else []


def _day(moment: datetime | None) -> str:
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


def _changes_through(agent: Agent, number: int, horizon: Kept | None = None):
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
    were made: each change's `after` is the memory as it left it. A
    memory's `pk` is the id of the change that made it. `start`: the store
    the changes are made to (by default, none)."""
    store: dict[str, Memory] = {memory.name: memory for memory in start}
    for event in events:
        if event.change == Change.DROPPED:
            continue  # nothing changed
        if event.after is None:
            store.pop(event.name, None)
            continue
        memory = store.get(event.name) or Memory(pk=event.pk, name=event.name)
        store[event.name] = memory
        after = event.after
        memory.description, memory.content, memory.is_open = (
            after["description"],
            after["content"],
            after["open"],
        )
        memory.version = after.get("version", memory.version)
        if event.change in (Change.CREATED, Change.UPDATED):
            memory.updated_at, memory.updated_by = event.created_at, event.by
    for memory in store.values():
        memory.tokens = count_tokens(memory.content)
        memory.bytes = memory_bytes(memory.name, memory.description, memory.content)
    return list(store.values())


def memories_at_block(
    agent: Agent, number: int, *, after: int | None = None, limit: int = MEMORIES.default_limit
) -> dict:
    """The store as it stood when block `number` ended, in the memories
    list's shape and pages; `maxOpenTokens` is the one the block was
    played with."""
    with one_moment():
        horizon = kept(agent, with_store=True)
        block = block_at(agent, number, horizon)
        memories = store_replay(_changes_through(agent, number, horizon), start=horizon.store())
    shown = [memory for memory in memories if after is None or memory.pk > after][: limit + 1]
    next_key = shown[limit - 1].pk if len(shown) > limit else None
    page = Page(items=[memory_wire(memory) for memory in shown[:limit]], next_key=next_key, keyset=MEMORIES)
    revision = _revision(agent, block.revision)
    return {
        **page.body(),
        "memoryEnabled": revision.memory_enabled,
        "openTokens": sum(memory.tokens for memory in memories if memory.is_open),
        "storeBytes": sum(memory.bytes for memory in memories),
        "maxOpenTokens": revision.max_open_tokens,
        "storeCapBytes": store_cap_bytes(),
    }


def memory_history_page(agent: Agent, name: str, *, after: int | None, limit: int) -> Page:
    """The changes of memory `name`, oldest first — a deleted memory's too."""
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
        raise NotFound(
            f"Agent '{agent.name}' has never had a memory named '{name[:80]}'.", code="memory_not_found"
        )
    return page


def event_wire(event: MemoryEvent, checkpoint_numbers: dict[int, int]) -> dict:
    return {
        "name": event.name,
        "change": event.change,
        "by": event.by,
        "turnId": str(event.turn_id) if event.turn_id else None,
        "block": event.block,
        "checkpoint": checkpoint_numbers.get(event.checkpoint_id),
        "before": event.before,
        "after": event.after,
        "note": event.note or None,
        "at": event.created_at.isoformat(),
    }


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


# --- diffs -------------------------------------------------------------------------------------
# difflib matches two texts' lines by searching for the longest run they
# share, then again on either side of it: each search compares each line of
# one stretch with every place the other text holds it, so the work grows
# with the product of the texts' lines, and faster still on lines that
# repeat. Every diff shown is bounded instead: at most DIFF_MAX_LINES lines
# (both sides together, which also bounds what is shown) and
# DIFF_MAX_COMPARISONS comparisons of a line (or a word) with another, and
# one read's diffs DIFF_READ_MAX_COMPARISONS in all. Past any bound, the
# change is shown replaced whole, with both sides' sizes.
DIFF_MAX_LINES = 2_000
DIFF_MAX_COMPARISONS = 500_000
DIFF_READ_MAX_COMPARISONS = 2_000_000


class DiffBudget:
    """The comparisons one read's diffs may still make."""

    def __init__(self, comparisons: int = DIFF_READ_MAX_COMPARISONS):
        self.left = comparisons

    def opcodes(self, a: list, b: list) -> list | None:
        """difflib's opcodes from `a` to `b`, or None past the bounds."""
        matcher = _BoundedMatcher(a, b, allowance=max(0, min(DIFF_MAX_COMPARISONS, self.left)))
        try:
            return matcher.get_opcodes()
        except _OutOfComparisons:
            return None
        finally:
            self.left -= matcher.spent


class _OutOfComparisons(Exception):
    pass


class _BoundedMatcher(difflib.SequenceMatcher):
    """A SequenceMatcher that counts each search's comparisons before it
    makes them, and stops rather than pass its allowance."""

    def __init__(self, a: list, b: list, *, allowance: int):
        self.allowance, self.spent = allowance, 0
        super().__init__(None, a, b, autojunk=False)

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi = len(self.a) if ahi is None else ahi
        self.spent += ahi - alo
        for item in islice(self.a, alo, ahi):
            if self.spent > self.allowance:
                raise _OutOfComparisons
            self.spent += len(self.b2j.get(item, ()))
        if self.spent > self.allowance:
            raise _OutOfComparisons
        return super().find_longest_match(alo, ahi, blo, bhi)


def lines_diff(before: str | None, after: str | None, budget: DiffBudget) -> list[dict]:
    """`after` against `before`, line by line: each line `same`, `removed` or
    `added` — or, past the bounds of a diff, one `replaced` change with both
    sides' lengths in characters."""
    a, b = (before or "").splitlines(), (after or "").splitlines()
    opcodes = budget.opcodes(a, b) if len(a) + len(b) <= DIFF_MAX_LINES else None
    if opcodes is None:
        return [{"op": "replaced", "beforeChars": len(before or ""), "afterChars": len(after or "")}]
    lines = []
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            lines += [{"op": "same", "text": text} for text in a[i1:i2]]
        else:
            lines += [{"op": "removed", "text": text} for text in a[i1:i2]]
            lines += [{"op": "added", "text": text} for text in b[j1:j2]]
    return lines


# --- checkpoints -----------------------------------------------------------------------------
# A checkpoint's id on the wire is its place among the agent's checkpoints
# (1 for the first), which an export, an import and a fork keep.


def checkpoint_numbers(agent: Agent) -> dict[int, int]:
    """Each checkpoint's number by its database id."""
    ids = Checkpoint.objects.filter(agent=agent).order_by("id").values_list("id", flat=True)
    return {pk: number for number, pk in enumerate(ids, 1)}


def checkpoint_brief(checkpoint: Checkpoint, number: int) -> dict:
    return {
        "id": number,
        "kind": checkpoint.kind,
        "throughBlock": checkpoint.through_block,
        "fromBlock": checkpoint.from_block,
        "tokens": checkpoint.block_tokens,
        "createdAt": checkpoint.created_at.isoformat(),
    }


def checkpoint_wire(checkpoint: Checkpoint, number: int) -> dict:
    return {
        **checkpoint_brief(checkpoint, number),
        "summary": checkpoint.summary,
        "openMemories": [
            {k: m[k] for k in ("name", "description", "content")} for m in checkpoint.open_memories
        ],
        "closedMemories": checkpoint.closed_memories,
        "contextBlock": checkpoint.context_block,
    }


def checkpoints_page(agent: Agent, *, after: int | None, limit: int) -> Page:
    """The agent's checkpoints, newest first."""
    numbers = checkpoint_numbers(agent)
    rows = Checkpoint.objects.filter(agent=agent).only(
        "kind", "through_block", "from_block", "block_tokens", "created_at"
    )
    return CHECKPOINTS.page(
        rows, after=after, limit=limit, wire=lambda found: [checkpoint_brief(c, numbers[c.pk]) for c in found]
    )


def checkpoint_detail(agent: Agent, number_text: str) -> dict:
    """Checkpoint number `number_text`, with what changed since the one
    before it: the summary, line by line, and each open memory the
    compactor rewrote (or whose rewrite it dropped, and why)."""
    with one_moment():
        return _checkpoint_detail(agent, number_text)


def _checkpoint_detail(agent: Agent, number_text: str) -> dict:
    number = int(number_text) if number_text.isdigit() and len(number_text) < 10 else 0
    pair = list(Checkpoint.objects.filter(agent=agent).order_by("id")[max(number - 2, 0) : number])
    if number < 1 or len(pair) < min(number, 2):
        raise NotFound(
            f"Agent '{agent.name}' has no checkpoint '{number_text[:20]}'.", code="checkpoint_not_found"
        )
    checkpoint, previous = pair[-1], (pair[0] if len(pair) == 2 else None)
    refusal = _checkpoint_refusal(agent, number, checkpoint, previous)
    if refusal:
        raise HistoryPruned(refusal)
    events = MemoryEvent.objects.filter(checkpoint=checkpoint).order_by("id")
    return _detail(checkpoint, number, previous, events, DiffBudget())


def _checkpoint_refusal(
    agent: Agent,
    number: int,
    checkpoint: Checkpoint,
    previous: Checkpoint | None,
    horizon: Kept | None = None,
) -> str | None:
    """Why checkpoint `number`, with what it changed, can no longer be
    shown (retention emptied it, or the one before it, or pruned the
    compactor's rewrites for it); None when it can."""
    if checkpoint.pruned_at is None and (previous is None or previous.pruned_at is None):
        horizon = kept(agent) if horizon is None else horizon
        rewrites_kept = checkpoint.from_block is None or checkpoint.from_block > horizon.changes
        if rewrites_kept:
            return None
        return (
            f"The compactor's rewrites for checkpoint {number} of agent '{agent.name}' are no longer kept: "
            f"{horizon.changes_pruned()}."
        )
    emptied, which = (checkpoint, number) if checkpoint.pruned_at else (previous, number - 1)
    return (
        f"Checkpoint {which} of agent '{agent.name}' was emptied on {_day(emptied.pruned_at)}, when the "
        f"history it folded was pruned, so "
        + (f"checkpoint {number}" if which == number else f"what checkpoint {number} changed since it")
        + " can no longer be shown; the checkpoints list still says what each folded and when."
    )


def checkpoints_detailed(agent: Agent, *, limit: int = CHECKPOINTS.default_limit) -> list[dict]:
    """The newest `limit` checkpoints, newest first, each as
    `checkpoint_detail` answers it — or, for one it refuses, as the list
    shows it with `pruned`, the sentence saying why: the same few queries
    however many there are."""
    with one_moment():
        return _checkpoints_detailed(agent, kept(agent), limit)


def _checkpoints_detailed(agent: Agent, horizon: Kept, limit: int) -> list[dict]:
    total = Checkpoint.objects.filter(agent=agent).count()
    # One more than shown: the oldest shown one's previous checkpoint.
    rows = list(Checkpoint.objects.filter(agent=agent).order_by("-id")[: limit + 1])[::-1]
    events: dict[int, list] = {}
    for event in MemoryEvent.objects.filter(checkpoint__in=rows).order_by("id"):
        events.setdefault(event.checkpoint_id, []).append(event)
    first = total - len(rows) + 1
    budget = DiffBudget()  # spent on the newest first, as they are shown
    newest_first = list(enumerate(rows))[::-1][:limit]
    shown = []
    for index, checkpoint in newest_first:
        number, previous = first + index, rows[index - 1] if index else None
        refusal = _checkpoint_refusal(agent, number, checkpoint, previous, horizon)
        if refusal:
            shown.append({**checkpoint_brief(checkpoint, number), "pruned": refusal})
        else:
            shown.append(_detail(checkpoint, number, previous, events.get(checkpoint.pk, []), budget))
    return shown


def _detail(
    checkpoint: Checkpoint, number: int, previous: Checkpoint | None, events, budget: DiffBudget
) -> dict:
    before = previous.summary if previous else None
    return {
        **checkpoint_wire(checkpoint, number),
        "previous": number - 1 if previous else None,
        "changes": {
            "summary": {
                "before": before,
                "after": checkpoint.summary,
                "lines": lines_diff(before, checkpoint.summary, budget),
            },
            "rewrites": _rewrites(checkpoint, events, budget),
        },
    }


def _rewrites(checkpoint: Checkpoint, events, budget: DiffBudget) -> list[dict] | None:
    """The compactor's changes to open memories for this checkpoint
    (`events`, oldest first); None for a checkpoint written before the
    studio linked them."""
    if checkpoint.from_block is None:
        return None
    rewrites = []
    for event in events:
        before, after = (event.before or {}).get("content"), (event.after or {}).get("content")
        rewrites.append(
            {
                "name": event.name,
                "applied": event.change != Change.DROPPED,
                "before": before,
                "after": after,
                "note": event.note or None,
                "lines": lines_diff(before, after, budget),
            }
        )
    return rewrites


# --- the timeline (for the agent page) --------------------------------------------------------


def timeline(agent: Agent, *, limit: int = 200) -> dict:
    """The newest `limit` blocks and checkpoints, oldest first: what the
    agent page's timeline offers to look at as of — and, once retention
    pruned some of its history, the sentence saying what (`pruned`)."""
    blocks = Block.objects.filter(agent=agent).only("number", "status", "folded", "created_at")
    horizon = kept(agent)
    return {
        "pruned": horizon.pruned() if horizon.through else None,
        "blocks": [
            {
                "block": block.number,
                "status": block.status,
                "folded": block.folded,
                "recorded": block.number >= agent.recorded_from_block,
                "createdAt": block.created_at.isoformat(),
            }
            for block in reversed(blocks.order_by("-number")[:limit])
        ],
        "checkpoints": list(reversed(checkpoints_page(agent, after=None, limit=limit).items)),
    }


# --- the agent file ------------------------------------------------------------------------------


# Blocks and memory changes an export reads, and writes, at a time.
FILE_BATCH = 200
# What an export hands on at a time, in bytes (about).
FILE_CHUNK_BYTES = 64 * 1024


@dataclass
class AgentFile:
    """The agent file in parts: `head`, every key but the last two, read at
    one moment; then `blocks` and `memoryHistory`, read FILE_BATCH at a
    time as they are iterated — so a long history is never held whole.
    Those later reads see no further than the first: the blocks through
    the newest ended one then, the memory changes up to the newest then."""

    head: dict
    blocks: Iterator[dict]
    memoryHistory: Iterator[dict]

    def document(self) -> dict:
        return {**self.head, "blocks": list(self.blocks), "memoryHistory": list(self.memoryHistory)}

    def chunks(self, *, render: Callable[[object], bytes], separators: tuple[str, str]) -> Iterator[bytes]:
        """The file as JSON, a chunk at a time: exactly what `render` makes
        of the whole document, when `separators` (between items, after a
        key) are the ones it writes."""
        item, key = (separator.encode() for separator in separators)
        written = bytearray(render(self.head)[:-1])  # all but its closing brace
        for name, values in (("blocks", self.blocks), ("memoryHistory", self.memoryHistory)):
            written += item + render(name) + key + b"["
            for index, value in enumerate(values):
                written += (item if index else b"") + render(value)
                if len(written) >= FILE_CHUNK_BYTES:
                    yield bytes(written)
                    written.clear()
            written += b"]"
        yield bytes(written + b"}")


def agent_document(agent: Agent, *, at_block: int | None = None) -> dict:
    """The agent as one JSON document (`FORMAT`, `VERSION`), whole, read
    at one moment: see `agent_file`."""
    with one_moment():
        return agent_file(agent, at_block=at_block).document()


def agent_file(agent: Agent, *, at_block: int | None = None) -> AgentFile:
    """The agent file (`FORMAT`, `VERSION`): its config and config
    history, memories, checkpoints, blocks with their turns, and every
    memory change. At `at_block`: as it stood when that block ended.
    Otherwise as it stands — but for a block still being played, so the
    file is as of the end of the block before it. A file carries the whole
    history: once any of it was pruned, none can be made (409)."""
    if at_block is not None:
        horizon = kept(agent)
        block_at(agent, at_block, horizon)
        _whole_check(agent, horizon)
        return _file(agent, blocks_through=at_block, changes_through=at_block)
    with one_moment():
        _whole_check(agent, kept(agent))
        agent = Agent.objects.get(pk=agent.pk)
        last = agent.last_block
        if Block.objects.filter(agent=agent, number=last, status=TurnStatus.RUNNING).exists():
            return _file(agent, blocks_through=last - 1, changes_through=last - 1)
        return _file(agent, blocks_through=last, changes_through=last + 1)


def _whole_check(agent: Agent, horizon: Kept) -> None:
    if horizon.through:
        raise HistoryPruned(
            f"Agent '{agent.name}' can no longer be written to an agent file (an export, or a fork): "
            f"{horizon.pruned()}, and a file carries the whole history."
        )


def _file(agent: Agent, *, blocks_through: int, changes_through: int) -> AgentFile:
    changes = _changes_through(agent, changes_through)
    newest_change = changes.aggregate(newest=Max("id"))["newest"] or 0
    checkpoints = list(
        Checkpoint.objects.filter(
            Q(from_block__lte=changes_through) | Q(from_block=None), agent=agent
        ).order_by("id")
    )
    numbers = {checkpoint.pk: number for number, checkpoint in enumerate(checkpoints, 1)}
    folded_through = checkpoints[-1].through_block if checkpoints else 0
    blocks = Block.objects.filter(agent=agent, number__lte=blocks_through).select_related("turn")
    changes = changes.filter(id__lte=newest_change)
    head = {
        "format": FORMAT,
        "version": VERSION,
        "name": agent.name,
        "exportedAt": timezone.now().isoformat(),
        "config": config_wire(agent),
        "configHistory": [
            {
                "revision": revision.number,
                "createdAt": revision.created_at.isoformat(),
                "config": config_wire(revision),
            }
            for revision in agent.revisions.order_by("number")
        ],
        "recordedFromBlock": agent.recorded_from_block,
        "memories": [memory_wire(memory) for memory in store_replay(_in_batches(changes, "id"))],
        "checkpoints": [
            checkpoint_wire(checkpoint, number) for number, checkpoint in enumerate(checkpoints, 1)
        ],
    }
    return AgentFile(
        head=head,
        blocks=(
            _block_file(b, folded=b.number <= folded_through, numbers=numbers)
            for b in _in_batches(blocks, "number")
        ),
        memoryHistory=(event_wire(event, numbers) for event in _in_batches(changes, "id")),
    )


def _in_batches(rows, key: str) -> Iterator:
    """`rows` in the order of `key` (unique), read FILE_BATCH at a time."""
    after = None
    while True:
        batch = rows.order_by(key) if after is None else rows.filter(**{f"{key}__gt": after}).order_by(key)
        batch = list(batch[:FILE_BATCH])
        yield from batch
        if len(batch) < FILE_BATCH:
            return
        after = getattr(batch[-1], key)


def _block_file(block: Block, *, folded: bool, numbers: dict[int, int]) -> dict:
    """A block as the file keeps it: every entry whole (tool call ids and
    model steps too), its turn, and what its first model call was given."""
    data = {key: value for key, value in block_wire(block).items() if key != "turnId"}
    context = {"revision": block.revision, "checkpoint": numbers.get(block.checkpoint_id)}
    return {
        **data,
        "folded": folded,
        "entries": block.entries,
        "turn": _turn_file(block.turn, block.entries) if block.turn else None,
        "context": context if block.revision is not None else None,
    }


def _turn_file(turn: Turn, entries: list) -> dict:
    return {
        "id": str(turn.uuid),
        "status": turn.status,
        "reply": turn_reply(turn, entries),
        "error": turn.error,
        "errorCode": turn.error_code,
        "compactionWaitMs": turn.compaction_wait_ms,
        "createdAt": turn.created_at.isoformat(),
        "startedAt": turn.started_at.isoformat() if turn.started_at else None,
        "endedAt": turn.ended_at.isoformat() if turn.ended_at else None,
    }
