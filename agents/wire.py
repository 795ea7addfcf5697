"""Every shape the agents app shows on the wire: the API's bodies, the
events' payloads, the pages' data. Built here and nowhere else; a shape
reads nothing itself unless it is not given what it shows (a turn's cost
and entries, when the caller has not read them already)."""

import json

from django.conf import settings

from agents.models import (
    Agent,
    AgentConfig,
    AgentRevision,
    Block,
    Checkpoint,
    Compaction,
    Replay,
    Turn,
    TurnStatus,
    entries_so_far,
)
from agents.provenance import key_shown
from agents.providers import default_model, studio_default_model
from billing import ledger
from memories.models import MemoryEvent
from studio.models import Game

# --- the game ----------------------------------------------------------------------------


def game_wire(game: Game) -> dict:
    return {
        "slug": game.slug,
        "name": game.name,
        "defaultModel": game.default_model or None,
        "studioDefaultModel": studio_default_model(),
        "effectiveDefaultModel": default_model(game),
    }


# --- agents ------------------------------------------------------------------------------


def config_wire(config: AgentConfig) -> dict:
    """A config (an agent's, or one of its revisions) as a definition sends it."""
    return {
        "systemPrompt": config.system_prompt,
        "model": config.model,
        "memory": {"maxOpenTokens": config.max_open_tokens} if config.memory_enabled else None,
        "compaction": {"type": config.compaction_type, "maxTokens": config.max_tokens},
        "tools": list(config.tools or ()),
    }


def agent_wire(agent: Agent, *, revision: AgentRevision | None, stats: dict | None = None) -> dict:
    """An agent's config and its newest `revision`'s record (None: not
    kept), with `stats` when given; without them, as the list shows it,
    with its block count."""
    data = {
        "name": agent.name,
        **config_wire(agent),
        "revision": revision_wire(revision) if revision else revision_unknown(agent.revision),
        "createdAt": agent.created_at.isoformat(),
        "updatedAt": agent.updated_at.isoformat(),
    }
    if agent.forked_from:
        data["forkedFrom"] = {"agent": agent.forked_from, "block": agent.forked_at_block}
    if stats is not None:
        data["stats"] = stats
    else:
        data["blocks"] = agent.last_block
    return data


def revision_wire(revision: AgentRevision) -> dict:
    """Who defined a revision of an agent's config, from where, and when."""
    return {
        "number": revision.number,
        "by": definer_wire(revision),
        "via": revision.via,
        "at": revision.created_at.isoformat(),
        "note": revision.note,
    }


def revision_unknown(number: int) -> dict:
    """A revision whose record is not kept (pruned)."""
    return {"number": number, "by": None, "via": "unknown", "at": None, "note": ""}


def revision_detail_wire(revision: AgentRevision) -> dict:
    """A revision with the definition it set, as `PUT /agents/{name}` takes it."""
    return {**revision_wire(revision), "definition": config_wire(revision)}


def definer_wire(revision: AgentRevision) -> dict | None:
    """Who defined it: a user or an API key by its name (a key by its
    prefix too, never its secret); None when nobody was recorded."""
    if revision.by_key:
        return {"type": "apiKey", "name": revision.by_name, "key": key_shown(revision.by_key)}
    if revision.by_name:
        return {"type": "user", "name": revision.by_name}
    return None


# --- turns -------------------------------------------------------------------------------


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


def turn_entries(turn: Turn) -> list:
    """The entries of the turn's block so far (none for a transient turn)."""
    block = Block.objects.filter(turn=turn).only("entries").first()
    if block is None:
        return []
    if turn.status in (TurnStatus.RUNNING, TurnStatus.WAITING):
        return block.entries + entries_so_far([turn.pk]).get(turn.pk, [])
    return block.entries


def turn_tool_calls(turn: Turn, entries: list | None = None) -> list[dict]:
    if entries is None:
        entries = turn_entries(turn)
    return [
        tool_call_shown(e, block=turn.block_number)
        for e in entries
        if e["type"] == "tool_call" and not e.get("pending")
    ]


def pending_tool_calls(entries: list) -> list[dict]:
    """The calls of the game's tools a waiting turn waits on."""
    return [
        {"callId": e["id"], "name": e["name"], "arguments": e["arguments"], "deadline": e["deadline"]}
        for e in entries
        if e["type"] == "tool_call" and e.get("pending")
    ]


def tool_call_shown(entry: dict, *, block: int | None) -> dict:
    """A recorded tool call as events and turn answers carry it: its
    result, and its arguments' text, up to STUDIO_SHOWN_TEXT_MAX_CHARS
    characters each. What is cut is marked, with its whole length and the
    block that keeps it whole (`GET …/history`; null for a transient turn,
    which keeps nothing): `"cut": {"block": 17, "result": 410000}`."""
    most = settings.STUDIO["SHOWN_TEXT_MAX_CHARS"]
    shown = {"name": entry["name"], "arguments": entry["arguments"], "result": entry["result"]}
    shown["isError"] = entry["isError"]
    if entry.get("notInOriginal"):  # a replay's call its original never made
        shown["notInOriginal"] = True
    cut: dict = {}
    if len(entry["result"]) > most:
        shown["result"], cut["result"] = entry["result"][:most] + "…", len(entry["result"])
    arguments, length = _arguments_shown(entry["arguments"], most)
    if length is not None:
        shown["arguments"], cut["arguments"] = arguments, length
    if cut:
        shown["cut"] = {"block": block, **cut}
    return shown


def _arguments_shown(arguments, most: int):
    """`arguments` with their strings cut to take `most` characters in all,
    and the length of their whole text; (`arguments`, None) when that is
    within `most`. Arguments made of many small values are shown as their
    text, cut."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    if len(text) <= most:
        return arguments, None
    if isinstance(arguments, str):
        return text[:most] + "…", len(text)
    left = most

    def cut(value, depth: int):
        nonlocal left
        if isinstance(value, str):
            keep = min(len(value), left)
            left -= keep
            return value if keep == len(value) else value[:keep] + "…"
        if depth < MAX_SHOWN_DEPTH and isinstance(value, dict):
            return {key: cut(item, depth + 1) for key, item in value.items()}
        if depth < MAX_SHOWN_DEPTH and isinstance(value, list):
            return [cut(item, depth + 1) for item in value]
        return value

    shown = cut(arguments, 0)
    if len(json.dumps(shown, ensure_ascii=False)) > 2 * most:
        shown = text[:most] + "…"
    return shown, len(text)


# Arguments nested deeper than this are shown as their text.
MAX_SHOWN_DEPTH = 32


def block_reply(status: str, entries: list) -> str:
    """The reply a played turn's block holds: its closing assistant message
    (a step's text before its tool calls carries its `step`)."""
    last = entries[-1] if entries else {}
    is_reply = last.get("role") == "assistant" and "step" not in last
    return last["content"] if status == TurnStatus.COMPLETED and is_reply else ""


def turn_reply(turn: Turn, entries: list) -> str:
    """A turn's reply, kept once: a transient turn's (it has no block) on
    the turn, a played turn's in its block (`entries`)."""
    return turn.reply or block_reply(turn.status, entries)


def turn_wire(turn: Turn, *, cost: dict | None = None, entries: list | None = None) -> dict:
    """A turn as the API and the pages answer it. `cost` and `entries`: what
    the send that ran it already holds (`engine.SendResult`); without them
    they are read."""
    entries = turn_entries(turn) if entries is None else entries
    data = {
        "id": str(turn.uuid),
        "status": turn.status,
        "transient": turn.is_transient,
        "block": turn.block_number,
        "reply": turn_reply(turn, entries),
        "toolCalls": turn_tool_calls(turn, entries),
        "cost": cost if cost is not None else turn_cost(turn),
        "compactionWaitMs": turn.compaction_wait_ms,
        "createdAt": turn.created_at.isoformat(),
        "endedAt": turn.ended_at.isoformat() if turn.ended_at else None,
    }
    if turn.error:
        data["error"] = turn.error
    if turn.error_code:
        data["errorCode"] = turn.error_code
    if turn.error_class:
        data["errorClass"] = turn.error_class
    if turn.cut_short_code:
        data["cutShort"] = {"code": turn.cut_short_code, "message": turn.cut_short}
    if turn.status == TurnStatus.WAITING:
        data["pendingToolCalls"] = pending_tool_calls(entries)
    return data


def turn_wire_started(turn: Turn, is_new: bool) -> dict:
    """A turn as a send that does not wait answers it: a new one has no
    cost and no tool calls yet (nothing is read); a repeat's is read."""
    if not is_new:
        return turn_wire(turn)
    return turn_wire(turn, cost=turn_cost(turn, []), entries=[])


def turns_wire(turns: list[Turn]) -> list[dict]:
    """Turns as `turn_wire` shows them, their costs and tool calls read in
    two queries however many turns there are."""
    lines = ledger.lines_by_turn(turn.uuid for turn in turns)
    entries = dict(Block.objects.filter(turn__in=turns).values_list("turn_id", "entries"))
    running = [
        turn.pk
        for turn in turns
        if turn.status in (TurnStatus.RUNNING, TurnStatus.WAITING) and turn.pk in entries
    ]
    for turn_id, recorded in entries_so_far(running).items() if running else ():
        entries[turn_id] = entries[turn_id] + recorded
    return [
        turn_wire(turn, cost=turn_cost(turn, lines.get(turn.uuid, [])), entries=entries.get(turn.pk, []))
        for turn in turns
    ]


# --- history, context, compactions, checkpoints ---------------------------------------------


def block_status(block: Block) -> str:
    """A block's status as it is shown: its turn's `waiting` while the turn
    waits for the game (the block itself stays `running` until its turn
    ends: every check of a block still being played reads that)."""
    turn = block.turn
    if block.status == TurnStatus.RUNNING and turn is not None and turn.status == TurnStatus.WAITING:
        return TurnStatus.WAITING
    return block.status


def block_wire(block: Block) -> dict:
    return {
        "block": block.number,
        "turnId": str(block.turn.uuid) if block.turn else None,
        "status": block_status(block),
        "folded": block.folded,
        "tokens": block.tokens,
        "createdAt": block.created_at.isoformat(),
        "entries": [entry_wire(entry) for entry in block.entries],
    }


def entry_wire(entry: dict) -> dict:
    """A block's entry as the history shows it: without the ids and steps
    the block keeps for the model; a call still waiting for the game has
    no result yet (null) and says until when it waits —
    `"waitingForGame": {"callId", "deadline", "timeoutSeconds"}`."""
    shown = {k: v for k, v in entry.items() if k not in ("id", "step", *WAITING_KEYS)}
    if entry.get("pending"):
        shown["result"] = None
        shown["waitingForGame"] = {
            "callId": entry["id"],
            "deadline": entry["deadline"],
            "timeoutSeconds": entry.get("timeoutSeconds"),
        }
    return shown


# What a call waiting for the game carries in its entry until it is answered.
WAITING_KEYS = ("pending", "deadline", "timeoutSeconds")


def compaction_wire(item: Compaction) -> dict:
    return {
        "id": str(item.uuid),
        "status": item.status,
        "reason": item.reason,
        "attempts": item.attempts,
        "error": item.error or None,
        "waitingForCredits": item.awaits_credits,
        "throughBlock": item.checkpoint.through_block if item.checkpoint else None,
        "createdAt": item.created_at.isoformat(),
        "finishedAt": item.finished_at.isoformat() if item.finished_at else None,
    }


def context_wire(context) -> dict:
    """What a model call is (or was) given, as the context views answer it."""
    return {
        "system": context.system,
        "contextBlock": context.context_block,
        "messages": context.messages,
        "tools": context.tools,
        "tokens": context.tokens(),
    }


def checkpoint_wire(checkpoint: Checkpoint) -> dict:
    """A checkpoint whole, as `GET …/checkpoint` answers the one in force."""
    return {
        "kind": checkpoint.kind,
        "throughBlock": checkpoint.through_block,
        "summary": checkpoint.summary,
        "openMemories": [
            {k: m[k] for k in ("name", "description", "content")} for m in checkpoint.open_memories
        ],
        "closedMemories": checkpoint.closed_memories,
        "closedUnlisted": checkpoint.closed_unlisted,
        "contextBlock": checkpoint.context_block,
        "tokens": checkpoint.block_tokens,
        "createdAt": checkpoint.created_at.isoformat(),
    }


def checkpoint_brief(checkpoint: Checkpoint, number: int) -> dict:
    """A checkpoint as the list shows it: `number` is its place among the
    agent's checkpoints (its id on the wire)."""
    return {
        "id": number,
        "kind": checkpoint.kind,
        "throughBlock": checkpoint.through_block,
        "fromBlock": checkpoint.from_block,
        "tokens": checkpoint.block_tokens,
        "createdAt": checkpoint.created_at.isoformat(),
    }


def checkpoint_numbered(checkpoint: Checkpoint, number: int) -> dict:
    """A checkpoint whole, with its place and the block it took force at."""
    return {**checkpoint_brief(checkpoint, number), **checkpoint_wire(checkpoint)}


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
        "fileBy": event.file_by or None,
        "at": event.created_at.isoformat(),
    }


# --- replays ---------------------------------------------------------------------------------


def replay_wire(replay: Replay, *, cost) -> dict:
    """A replay as the list shows it. `cost`: the credits its copy was
    charged (its turns and compactions)."""
    return {
        "id": str(replay.uuid),
        "agent": replay.agent.name,
        "replayAgent": replay.replay_agent_name,
        "status": replay.status,
        "fromBlock": replay.from_block,
        "through": replay.through_block,
        "definition": replay.changes,
        "progress": {"played": replay.played, "total": replay.total},
        "cost": {"total": ledger.credits_text(cost)},
        "error": replay.error or None,
        "errorCode": replay.error_code or None,
        "createdAt": replay.created_at.isoformat(),
        "startedAt": replay.started_at.isoformat() if replay.started_at else None,
        "endedAt": replay.ended_at.isoformat() if replay.ended_at else None,
    }


def replay_side(block: Block, lines: dict) -> dict:
    """One side of a replay's row: what a block's turn said and did, and
    what it cost (`lines`: cost lines by turn id)."""
    turn, entries = block.turn, block.entries
    return {
        "turnId": str(turn.uuid) if turn else None,
        "status": block.status,
        "reply": turn_reply(turn, entries) if turn else block_reply(block.status, entries),
        "toolCalls": turn_tool_calls(turn, entries),
        "tokens": block.tokens,
        "cost": turn_cost(turn, lines.get(turn.uuid, [])) if turn else None,
        "error": (turn.error if turn else "") or None,
    }


def replay_kept_row(block: Block, lines: dict) -> dict:
    """What a replay keeps of a block its copy played, once the copy goes:
    the player's message and the replay's side."""
    return {
        "message": block.entries[0]["content"] if block.entries else None,
        "replay": replay_side(block, lines),
    }


def replay_row(
    number: int, original: Block | None, replayed: Block | None, lines: dict, *, kept: dict | None = None
) -> dict:
    """Block `number` as the original played it and as the replay did
    (None: not kept any more, or not played yet). `kept`: the row as the
    replay kept it once its copy went (`replay_kept_row`), for `replayed`."""
    before = replay_side(original, lines) if original else None
    after = replay_side(replayed, lines) if replayed else (kept or {}).get("replay")
    said = (original or replayed).entries if (original or replayed) else []
    both = before is not None and after is not None
    return {
        "block": number,
        "message": said[0]["content"] if said else (kept or {}).get("message"),
        "original": before,
        "replay": after,
        "sameReply": before["reply"] == after["reply"] if both else None,
        "sameToolCalls": before["toolCalls"] == after["toolCalls"] if both else None,
    }


def _memory_side(memory) -> dict | None:
    if memory is None:
        return None
    return {"description": memory.description, "content": memory.content, "open": memory.is_open}


def memory_compared(name: str, original, replayed, lines: list[dict]) -> dict:
    """One memory in the original's store and the replay's (None where a
    store has none by that name): `change` is the replay's, against the
    original — `same`, `changed`, `added` (only the replay has it) or
    `removed` (only the original has it); `lines`, the content's diff
    (empty when the content is the same)."""
    before, after = _memory_side(original), _memory_side(replayed)
    if before is None:
        change = "added"
    elif after is None:
        change = "removed"
    else:
        change = "same" if before == after else "changed"
    return {"name": name, "change": change, "original": before, "replay": after, "lines": lines}
