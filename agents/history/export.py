"""The agent file an export writes: the whole agent — config and its
revisions, every block and turn, the checkpoints, the store and its
changes — as one JSON document, read and handed on in batches so a long
history never sits whole in memory. Its format is `file_format`; an import
reads it back (`imports`)."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from django.db.models import Max, Q
from django.utils import timezone

from agents.history import as_of
from agents.history.as_of import (
    HistoryPruned,
    Kept,
    block_at,
    kept,
    one_moment,
    store_replay,
)
from agents.models import Agent, Block, Checkpoint, Turn, TurnStatus
from agents.sending.context import NotRecorded
from agents.wire import block_wire, checkpoint_numbered, config_wire, event_wire, turn_reply
from memories.selectors import memory_wire

FORMAT = "studio.agent"


VERSION = 1


# Blocks and memory changes an export reads, and writes, at a time.
FILE_BATCH = 200
# What an export hands on at a time, in bytes (about).
FILE_CHUNK_BYTES = 64 * 1024


@dataclass
class Export:
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


def agent_file(agent: Agent, *, at_block: int | None = None) -> Export:
    """The agent file (`FORMAT`, `VERSION`): its config and config
    history, memories, checkpoints, blocks with their turns, and every
    memory change. At `at_block`: as it stood when that block ended (0:
    before its first block, as it was defined — with its config as it is
    now, as at any block). Otherwise as it stands — but for a block still being played, so the
    file is as of the end of the block before it. A file carries the whole
    history: once any of it was pruned, none can be made (409)."""
    if at_block is not None:
        horizon = kept(agent)
        if at_block:
            block_at(agent, at_block, horizon)
        elif agent.recorded_from_block > 1:
            raise NotRecorded(
                f"Agent '{agent.name}' played blocks before the studio kept when each change happened, so "
                f"its first blocks cannot be started again from nothing; blocks from "
                f"{agent.recorded_from_block} on can."
            )
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


def _file(agent: Agent, *, blocks_through: int, changes_through: int) -> Export:
    changes = as_of.changes_through(agent, changes_through)
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
            checkpoint_numbered(checkpoint, number) for number, checkpoint in enumerate(checkpoints, 1)
        ],
    }
    return Export(
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
