"""Agents made from an agent file: an imported one, a fork (another
agent's file as of one of its blocks), or a replay's hidden copy (a fork
with a changed config, `agents.replays`).

The import view checks the file's shape (`file_format`); here, what ties
its parts together — blocks numbered 1..n, checkpoints 1..m that fold only
blocks it has, the turns, revisions and checkpoints that blocks and memory
changes name. Then one transaction makes the agent with all of it, keeping
every time the file gives; every count is taken here, never the file's,
and the store and its history are written by the store
(`memories.store.memories_install`), under its rules. Turns get new ids (a
turn id is unique across the studio) and the memory changes follow them;
no cost line is made: the ledger belongs to the game that paid.

An import's file comes from outside the studio, and game code may have
edited it: its memory changes are kept as the file tells them, written by
the file (`Writer.FILE`; who the file says made each is kept beside it,
`MemoryEvent.file_by`) — never credited to the agent or the compactor —
and each memory's history in this studio starts with an `imported` change
saying who imported it, from which file, and when: the memory's writer is
the import. A fork and a replay's copy come from the studio's own records
and keep them as they are.

A made agent's config revisions say where they came from (`provenance`):
those of its file or source are copied with it (via `import`, `fork`,
`replay`; by nobody: who defined them there is not this studio's record),
and one more, the config it is made with, records who made it, now.
"""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.history.export import agent_document
from agents.models import Agent, AgentRevision, Block, Checkpoint, DefinedVia, Turn
from agents.provenance import Definer, by_fields
from agents.sending.context import entries_tokens
from agents.services import (
    agent_name_check,
    agent_room_check,
    definition_check,
    definition_fields,
    definition_from_config,
    definition_model_resolved,
    definition_paced,
    revisions_bound,
)
from agents.wire import block_reply
from memories.models import Change, Memory, MemoryEvent, Writer
from memories.store import NotInstallable, memories_install, memory_name
from studio.errors import Conflict, DomainError
from studio.models import Game
from studio.tokens import count_tokens


class BadFile(DomainError):
    code = "invalid_agent_file"


@dataclass(frozen=True)
class ImportedBy:
    """Who imports a file, and which: for the `imported` change of each
    memory it installs ("API key sk_3f… (label)", "'dm.json'")."""

    who: str
    file: str
    # The user or API key importing it, for the revision it makes (`provenance`).
    definer: Definer = None

    @classmethod
    def named(cls, who: str, file_name: str | None, definer: Definer = None) -> "ImportedBy":
        """`who` (`definer`) importing the file called `file_name` (None: a
        file the request gave no name)."""
        file = f"'{file_name}'" if file_name else "a file posted to the API"
        return cls(who=who, file=file, definer=definer)


@dataclass(frozen=True)
class Made:
    """How a made agent's revisions are recorded: where it came from
    (`via`, and `origin` for the revisions copied: "dm", "the file posted
    to the API"), who made it (`by`), and the `note` of the revision it is
    made with."""

    via: DefinedVia
    by: Definer
    origin: str
    note: str

    def copied(self, number: int) -> dict:
        return {"via": self.via, **by_fields(None), "note": f"Revision {number} of {self.origin}"[:300]}

    def act(self) -> dict:
        return {"via": self.via, **by_fields(self.by), "note": self.note[:300]}


def agent_import(*, game: Game, document: dict, by: ImportedBy, name: str | None = None) -> Agent:
    """A new agent in `game` from an agent file whose shape is checked, named
    `name` or as the file names it."""
    name = document["name"] if name is None else name
    agent_name_check(name)
    _name_free_check(game, name)
    definition = definition_from_config(document["config"])
    try:
        definition = definition_model_resolved(definition, game=game)
        definition_check(definition, system_tokens=count_tokens(definition.system_prompt))
    except DomainError as refused:
        raise BadFile(f"config: {refused.message}") from None
    document = _models_named(document, definition.model)
    _document_check(document)
    made = Made(DefinedVia.IMPORT, by.definer, origin=by.file, note=f"Imported from {by.file}")
    try:
        return _agent_make(
            game, name, {**document, "blocks": _counted(document["blocks"])}, made=made, imported=by
        )
    except NotInstallable as refused:
        raise BadFile(f"memories[{refused.index}]: {refused.message}.") from None


def _models_named(document: dict, model: str) -> dict:
    """The file with `model` — its config's, or the game's default where it
    names none — in each of its configs that names none, as a definition
    without one gets it."""

    def named(config: dict) -> dict:
        return config if config.get("model") else {**config, "model": model}

    history = [{**entry, "config": named(entry["config"])} for entry in document["configHistory"]]
    return {**document, "config": named(document["config"]), "configHistory": history}


def agent_fork(*, agent: Agent, name: str, at_block: int, by: Definer) -> Agent:
    """A new agent in the same game with the same config, made from
    `agent` as it stood when block `at_block` ended, by `by` (a user, an
    API key). `agent` is only read."""
    agent_name_check(name)
    _name_free_check(agent.game, name)
    made = Made(DefinedVia.FORK, by, origin=agent.name, note=f"Forked from {agent.name} at block {at_block}")
    try:
        document = agent_document(agent, at_block=at_block)
        return _agent_make(agent.game, name, document, made=made, forked=(agent.name, at_block))
    except NotInstallable as refused:
        raise Conflict(
            f"Agent '{agent.name}' as of block {at_block} does not fit its config now: {refused.message}. "
            "Fork from another block, or redefine the agent to make room first.",
            code="store_does_not_fit",
        ) from None


def replay_copy_document(*, agent: Agent, at_block: int, config: dict) -> dict:
    """The file of `agent` as it stood when block `at_block` ended (0:
    before its first), with `config` (a checked config, in its wire
    shape) for its own. Read at one moment; `agent` is only read."""
    return {**agent_document(agent, at_block=at_block), "config": config}


def replay_copy_make(*, agent: Agent, name: str, document: dict) -> Agent:
    """A replay's copy of `agent` from `replay_copy_document`: a fork the
    game's agents list leaves out (`Agent.replay_of`), but not its agent
    quota. `name` is one no definition can take."""
    made = Made(
        DefinedVia.REPLAY, None, origin=agent.name, note=f"The definition a replay of {agent.name} plays"
    )
    try:
        return _agent_make(agent.game, name, document, made=made, replay_of=agent)
    except NotInstallable as refused:
        raise Conflict(
            f"Agent '{agent.name}' as it stood then does not fit the replay's config: {refused.message}. "
            "Replay from another block, or change the definition to make room.",
            code="store_does_not_fit",
        ) from None


def _name_free_check(game: Game, name: str) -> None:
    if Agent.objects.filter(game=game, name=name).exists():
        raise _taken(name)


def _taken(name: str) -> Conflict:
    return Conflict(
        f"There is already an agent named '{name}' in this game; choose another name.", code="name_taken"
    )


# --- what ties the file together ----------------------------------------------------------


def _document_check(document: dict) -> None:
    blocks, checkpoints = document["blocks"], document["checkpoints"]
    if [b["block"] for b in blocks] != list(range(1, len(blocks) + 1)):
        raise BadFile("blocks: they must be numbered 1, 2, 3… in order, with none missing.")
    if [c["id"] for c in checkpoints] != list(range(1, len(checkpoints) + 1)):
        raise BadFile("checkpoints: their ids must be 1, 2, 3… in order, with none missing.")
    for index, checkpoint in enumerate(checkpoints):
        if checkpoint["throughBlock"] > len(blocks):
            raise BadFile(
                f"checkpoints[{index}].throughBlock: it folds blocks through {checkpoint['throughBlock']}, "
                f"but the file has {len(blocks)} blocks."
            )
    if document["recordedFromBlock"] > len(blocks) + 1:
        raise BadFile(f"recordedFromBlock: the file has {len(blocks)} blocks.")
    revisions = [r["revision"] for r in document["configHistory"]]
    if len(set(revisions)) != len(revisions):
        raise BadFile("configHistory: two revisions have the same number.")
    turn_ids = _blocks_check(blocks, checkpoints, set(revisions))
    _history_check(document["memoryHistory"], turn_ids, len(checkpoints))
    _memories_check(document["memories"])


def _blocks_check(blocks: list, checkpoints: list, revisions: set) -> set:
    """Check each block against the checkpoints and revisions; returns the
    ids of the blocks' turns."""
    folded_through = checkpoints[-1]["throughBlock"] if checkpoints else 0
    turn_ids = set()
    for index, block in enumerate(blocks):
        where = f"blocks[{index}]"
        if block["folded"] != (block["block"] <= folded_through):
            raise BadFile(
                f"{where}.folded: the newest checkpoint folds blocks through {folded_through}, "
                f"so block {block['block']} is {'' if block['block'] <= folded_through else 'not '}folded."
            )
        first = block["entries"][0]
        if first["type"] != "message" or first.get("role") != "user":
            raise BadFile(f"{where}.entries[0]: a block starts with the player's message (a user message).")
        turn = block["turn"]
        if turn is not None:
            if str(turn["id"]) in turn_ids:
                raise BadFile(f"{where}.turn.id: another block has turn {turn['id']}.")
            turn_ids.add(str(turn["id"]))
        context = block["context"]
        if context is not None and context["revision"] not in revisions:
            raise BadFile(f"{where}.context.revision: configHistory has no revision {context['revision']}.")
        if context is not None and (context["checkpoint"] or 0) > len(checkpoints):
            raise BadFile(f"{where}.context.checkpoint: there is no checkpoint {context['checkpoint']}.")
    return turn_ids


def _history_check(events: list, turn_ids: set, checkpoints: int) -> None:
    for index, event in enumerate(events):
        if event["turnId"] is not None and str(event["turnId"]) not in turn_ids:
            raise BadFile(f"memoryHistory[{index}].turnId: no block has turn {event['turnId']}.")
        if (event["checkpoint"] or 0) > checkpoints:
            raise BadFile(f"memoryHistory[{index}].checkpoint: there is no checkpoint {event['checkpoint']}.")


def _memories_check(memories: list) -> None:
    """The store's own rules (the cap, the open budget) are its install's.
    Names are compared as the store keeps them (NFC)."""
    names = [memory_name(m["name"]) for m in memories]
    if len(set(names)) != len(names):
        raise BadFile("memories: two memories have the same name (compared in Unicode NFC form).")


# --- making the agent -------------------------------------------------------------------------


def _time(value) -> datetime | None:
    """A time from the file: already parsed, or ISO 8601 text (UTC when it
    names no zone)."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = parse_datetime(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _agent_make(
    game: Game,
    name: str,
    document: dict,
    *,
    made: Made,
    replay_of: Agent | None = None,
    imported: ImportedBy | None = None,
    forked: tuple[str, int] | None = None,
) -> Agent:
    """`forked`: the agent a fork is made from (its name) and the block."""
    blocks = document["blocks"]
    fields = definition_fields(definition_from_config(document["config"]))
    revisions = _revisions(document, fields, made)
    if replay_of is None:
        definition_paced(game)  # a fork or an import writes revisions, as a definition does
    with transaction.atomic():
        # A fork, an import or a replay's copy is a new agent, within the game's quota.
        agent_room_check(game, for_replay=replay_of is not None)
        try:
            with transaction.atomic():
                agent = Agent.objects.create(
                    game=game,
                    name=name,
                    last_block=len(blocks),
                    revision=revisions[-1].number,
                    recorded_from_block=document["recordedFromBlock"],
                    replay_of=replay_of,
                    forked_from=forked[0] if forked else "",
                    forked_at_block=forked[1] if forked else None,
                    **fields,
                )
        except IntegrityError:
            raise _taken(name) from None
        for revision in revisions:
            revision.agent = agent
        _bulk_create(AgentRevision, revisions, "created_at")
        checkpoints = _checkpoints_make(agent, document["checkpoints"])
        turns = _turns_make(agent, blocks)
        _blocks_make(agent, blocks, turns, checkpoints)
        revisions_bound(agent.pk)  # a file may carry any number; those its blocks name stay
        memories = _memories(document["memories"])
        history = _history(document["memoryHistory"], turns, checkpoints)
        if imported is not None:
            history = _imported_history(memories, history, imported, last_block=len(blocks))
        memories_install(agent=agent, memories=memories, history=history)
    return agent


def _revisions(document: dict, fields: dict, made: Made) -> list[AgentRevision]:
    """The file's config history, then its config as the revision the
    agent is made with, now (`made`)."""
    revisions = [
        AgentRevision(
            number=entry["revision"],
            created_at=_time(entry["createdAt"]),
            **definition_fields(definition_from_config(entry["config"])),
            **made.copied(entry["revision"]),
        )
        for entry in sorted(document["configHistory"], key=lambda entry: entry["revision"])
    ]
    number = revisions[-1].number + 1 if revisions else 1
    revisions.append(AgentRevision(number=number, **fields, **made.act()))
    return revisions


def _checkpoints_make(agent: Agent, checkpoints: list) -> list[Checkpoint]:
    return _bulk_create(
        Checkpoint,
        (
            Checkpoint(
                agent=agent,
                kind=c["kind"],
                through_block=c["throughBlock"],
                from_block=c["fromBlock"],
                summary=c["summary"],
                open_memories=c["openMemories"],
                closed_memories=c["closedMemories"],
                closed_unlisted=c["closedUnlisted"],
                context_block=c["contextBlock"],
                block_tokens=count_tokens(c["contextBlock"]),
                created_at=_time(c["createdAt"]),
            )
            for c in checkpoints
        ),
        "created_at",
    )


def _turns_make(agent: Agent, blocks: list) -> dict[str, Turn]:
    """A turn with a new id for each block that had one, by its old id."""
    turns = {}
    for block in blocks:
        turn = block["turn"]
        if turn is not None:
            turns[str(turn["id"])] = Turn(
                agent=agent,
                uuid=uuid.uuid4(),
                status=turn["status"],
                block_number=block["block"],
                reply=_reply_kept(turn, block["entries"]),
                error=turn["error"],
                error_code=turn["errorCode"],
                compaction_wait_ms=turn["compactionWaitMs"],
                created_at=_time(turn["createdAt"]),
                started_at=_time(turn["startedAt"]),
                ended_at=_time(turn["endedAt"]),
            )
    _bulk_create(Turn, turns.values(), "created_at")
    return turns


def _reply_kept(turn: dict, entries: list) -> str:
    """What the turn keeps of its reply: nothing when its block holds it
    (`wire.turn_reply` reads it there)."""
    return "" if turn["reply"] == block_reply(turn["status"], entries) else turn["reply"]


def _blocks_make(agent: Agent, blocks: list, turns: dict, checkpoints: list) -> None:
    made = []
    for block in blocks:
        context = block["context"] or {}
        turn, checkpoint = block["turn"], context.get("checkpoint")
        made.append(
            Block(
                agent=agent,
                number=block["block"],
                turn=turns[str(turn["id"])] if turn else None,
                status=block["status"],
                entries=block["entries"],
                tokens=block["tokens"],
                folded=block["folded"],
                revision=context.get("revision"),
                checkpoint=checkpoints[checkpoint - 1] if checkpoint else None,
                created_at=_time(block["createdAt"]),
            )
        )
    _bulk_create(Block, made, "created_at")


def _counted(blocks: list) -> list:
    """The file's blocks with their tokens counted here: holds and the
    maxTokens guard add up these counts, so a file's own are never taken.
    (A fork keeps its source's, counted as the entries were sent; counted
    again from stored JSON, whose keys may stand in another order, one can
    differ by a token.)"""
    return [{**block, "tokens": entries_tokens(block["entries"])} for block in blocks]


def _memories(memories: list) -> list[Memory]:
    """The file's store as unsaved memories; the store install counts them."""
    return [
        Memory(
            name=memory_name(m["name"]),
            description=m["description"],
            content=m["content"],
            is_open=m["open"],
            version=m["version"],
            updated_by=m["updatedBy"],
            updated_at=_time(m["updatedAt"]),
        )
        for m in memories
    ]


def _history(events: list, turns: dict, checkpoints: list) -> list[MemoryEvent]:
    return [
        MemoryEvent(
            name=memory_name(e["name"]),
            change=e["change"],
            by=e["by"],
            file_by=e.get("fileBy") or "",
            turn_id=turns[str(e["turnId"])].uuid if e["turnId"] else None,
            block=e["block"],
            checkpoint=checkpoints[e["checkpoint"] - 1] if e["checkpoint"] else None,
            before=e["before"],
            after=e["after"],
            note=e["note"] or "",
            created_at=_time(e["at"]),
        )
        for e in events
    ]


def _imported_history(
    memories: list[Memory], history: list[MemoryEvent], by: ImportedBy, *, last_block: int
) -> list[MemoryEvent]:
    """The file's changes, written by the file (who it says made each kept
    as `file_by`), then each memory's `imported` change: installed as the
    file held it, written by the import, now — where the studio's own
    history of it begins. It shows from the file's last block on (what the
    file's changes say of that block may not be what the file's store
    holds)."""
    now = timezone.now()
    for event in history:
        if event.by != Writer.FILE:  # (a file's own file changes say who already)
            event.by, event.file_by = Writer.FILE, event.by
    note = f"Imported by {by.who} from {by.file}."
    for memory in memories:
        memory.updated_by, memory.updated_at = Writer.IMPORT, now
        after = {"description": memory.description, "content": memory.content, "open": memory.is_open}
        history.append(
            MemoryEvent(
                name=memory.name,
                change=Change.IMPORTED,
                by=Writer.IMPORT,
                block=last_block or None,
                before=None,
                after={**after, "version": memory.version},
                note=note,
                created_at=now,
            )
        )
    return history


def _bulk_create(model, rows, field: str) -> list:
    """Make `rows`, keeping the times they were given in `field` (a row
    given none keeps now): saving sets an auto_now field to now, and an
    update after it does not."""
    rows = list(rows)
    times = [getattr(row, field) for row in rows]
    made = model.objects.bulk_create(rows)
    for row, at in zip(made, times, strict=True):
        setattr(row, field, at or getattr(row, field))
    model.objects.bulk_update(made, [field], batch_size=500)
    return made
