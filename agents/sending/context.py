"""What the agent sees: the context block and the assembled context.

The model is given, in order: the system prompt; the checkpoint's context
block (stored text, unchanged between compactions); the verbatim blocks
after the checkpoint; the new message — and, on a normal send with memory
on, the memory tools' definitions. Token counts come from the numbers
stored with each piece (the tools' once per process), so assembling never
re-encodes old text.

Messages are provider-neutral dicts:
  {"role": "user" | "assistant", "content": str}
  {"role": "assistant", "content": str | None, "toolCalls": [{"id", "name", "arguments"}]}
  {"role": "tool", "toolCallId": str, "name": str, "content": str, "isError": bool}
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property

from agents.models import ENDED_STATUSES, Agent, AgentConfig, AgentRevision, Block, Checkpoint
from agents.providers import counts_are_exact, tool_tokens
from memories.models import Memory
from memories.store import headings_budget
from memories.tools import MEMORY_TOOLS
from studio.errors import Conflict
from studio.runtime import sql
from studio.tokens import TOKENIZER, count_message_tokens, count_tokens

BLOCK_HEADER = (
    "[Context — written by the platform, not said by anyone. "
    "Play continues from the messages after this one.]"
)
BLOCK_FOOTER = "[End of context]"


def render_context_block(
    *, summary: str | None, open_memories: list[dict], closed_memories: list[dict], closed_unlisted: int = 0
) -> str:
    """The context block; tests/agents/test_context.py pins its exact text.
    Sections with nothing in them are left out. What the agent and the
    compactor wrote is escaped where it would pass for the block's own
    framing (see `escaped`). `closed_unlisted` closed memories are counted
    after the listing, not listed (`closed_listing`)."""
    parts = [BLOCK_HEADER]
    if summary:
        parts.append("## Summary of earlier conversation\n\n" + escaped(summary.strip("\n")))
    if open_memories:
        rendered = "\n\n".join(f"### {_heading(m)}\n{escaped(m['content'])}" for m in open_memories)
        parts.append("## Open memories — current as of this point\n\n" + rendered)
    if closed_memories or closed_unlisted:
        lines = [f"- {_heading(m)}" for m in closed_memories]
        if closed_unlisted:
            lines.append(_unlisted_line(closed_unlisted))
        listing = "\n".join(lines)
        parts.append("## Closed memories — call open_memory to read one\n\n" + listing)
    parts.append(BLOCK_FOOTER)
    return "\n\n".join(parts)


def _unlisted_line(count: int) -> str:
    return f"- … and {count:,} more, written longest ago: open_memory opens any of them by name."


def checkpoint_fields(
    *, summary: str | None, open_memories: list[dict], closed_memories: list[dict], closed_unlisted: int = 0
) -> dict:
    """What a checkpoint stores besides its agent, kind and through block:
    the summary and memories, and the context block rendered from them with
    its tokens — so the stored block always matches what it records."""
    text = render_context_block(
        summary=summary,
        open_memories=open_memories,
        closed_memories=closed_memories,
        closed_unlisted=closed_unlisted,
    )
    return {
        "summary": summary,
        "open_memories": open_memories,
        "closed_memories": closed_memories,
        "closed_unlisted": closed_unlisted,
        "context_block": text,
        "block_tokens": count_tokens(text),
    }


# Lines that would pass for the block's framing: its header, its footer, a
# section or memory heading.
_FRAMING = ("[Context —", BLOCK_FOOTER, "##")


def escaped(text: str, *, starts_line: bool = True) -> str:
    """`text` with a backslash before each line that would pass for the
    block's framing — so what a memory or a summary says can never end the
    block early or start a section of its own. Other text is unchanged."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if (index or starts_line) and line.lstrip().startswith(_FRAMING):
            indent = len(line) - len(line.lstrip())
            lines[index] = line[:indent] + "\\" + line[indent:]
    return "".join(lines)


def _heading(memory: dict) -> str:
    # A name or description is one line as the tools take it; any other
    # line break in one (U+2028 and the like) still cannot open a line of framing.
    name = escaped(memory["name"], starts_line=False)
    return f"{name} — {escaped(memory['description'], starts_line=False)}"


def open_memories_snapshot(agent: Agent, *, with_ids: bool = False) -> list[dict]:
    """The open memories as a checkpoint records them: in full, with the
    version read and, `with_ids`, which memory it is (what the compactor's
    non-blind writes check). In the order they were made. With memory off,
    the agent has no memory to see."""
    if not agent.memory_enabled:
        return []
    shown = []
    for memory in Memory.objects.filter(agent=agent, is_open=True).order_by("id"):
        memory_shown = {
            "name": memory.name,
            "description": memory.description,
            "content": memory.content,
            "version": memory.version,
        }
        shown.append({**memory_shown, "id": memory.pk} if with_ids else memory_shown)
    return shown


# The fewest tokens a listed memory's line can take ("- a — b").
HEADING_LEAST_TOKENS = 5


def closed_listing(agent: Agent) -> tuple[list[dict], int]:
    """The closed memories a checkpoint lists by description, and how many
    more it only counts. The listing takes at most MEMORY_HEADINGS_RATIO of
    maxTokens: the memories written most recently that fit, among as many
    as that budget could list at the fewest tokens a line takes, shown in
    the order they were made. However many memories an
    agent is steered into keeping, its context block — and so every send
    and every checkpoint written — stays within its budget; the store cap
    is the only bound on the store itself."""
    if not agent.memory_enabled:
        return [], 0
    closed = Memory.objects.filter(agent=agent, is_open=False)
    # No more rows than the budget could list, the rest counted: however
    # many memories there are, a checkpoint reads what it may show.
    most = max(headings_budget(agent), 0) // HEADING_LEAST_TOKENS + 1
    rows = list(closed.order_by("-updated_at", "-id").values_list("id", "name", "description")[:most])
    total = closed.count() if len(rows) == most else len(rows)
    budget = headings_budget(agent) - count_tokens(_unlisted_line(total))
    listed, spent = [], 0
    for pk, name, description in rows:
        if budget - spent < HEADING_LEAST_TOKENS:
            break
        memory = {"name": name, "description": description}
        line = count_tokens(f"- {_heading(memory)}\n")
        if spent + line <= budget:  # one line past what is left does not hide the rest
            listed.append((pk, memory))
            spent += line
    listed.sort(key=lambda shown: shown[0])
    return [memory for _, memory in listed], total - len(listed)


# --- blocks as messages ---------------------------------------------------------


def user_entry(content: str) -> dict:
    return {"type": "message", "role": "user", "content": content}


def assistant_entry(content: str) -> dict:
    return {"type": "message", "role": "assistant", "content": content}


def tool_call_entry(*, id: str, step: int, name: str, arguments, result: str, is_error: bool) -> dict:
    """A tool call as its block keeps it (not the `tool_call` event)."""
    return {
        "type": "tool_call",
        "id": id,
        "step": step,
        "name": name,
        "arguments": arguments,
        "result": result,
        "isError": is_error,
    }


def entries_to_messages(entries: list[dict]) -> list[dict]:
    """A block's entries as model messages. The tool calls of one model
    step (same `step`) become one assistant message — carrying the step's
    text too, when the model said something beside its calls — followed by
    one tool message per call."""
    messages: list[dict] = []
    results: list[dict] = []
    group_step = None  # the step whose calls are being gathered, if any
    for entry in entries:
        is_call = entry["type"] == "tool_call"
        if results and (not is_call or entry.get("step") != group_step):
            messages.extend(results)
            results, group_step = [], None
        if not is_call:
            messages.append({"role": entry["role"], "content": entry["content"]})
            if entry["role"] == "assistant":
                group_step = entry.get("step")
            continue
        last = messages[-1] if messages else None
        same_step = last and last["role"] == "assistant" and group_step == entry.get("step")
        if not same_step:
            last = {"role": "assistant", "content": None}
            messages.append(last)
            group_step = entry.get("step")
        last.setdefault("toolCalls", []).append(
            {"id": entry["id"], "name": entry["name"], "arguments": entry["arguments"]}
        )
        results.append(
            {
                "role": "tool",
                "toolCallId": entry["id"],
                "name": entry["name"],
                "content": entry["result"],
                "isError": entry["isError"],
            }
        )
    messages.extend(results)
    return messages


def entries_tokens(entries: list[dict]) -> int:
    return sum(count_message_tokens(m) for m in entries_to_messages(entries))


# --- assembly ---------------------------------------------------------------------


@dataclass
class Context:
    system: str
    context_block: str | None
    messages: list[dict]
    tools: list[str]
    system_tokens: int
    block_tokens: int
    message_tokens: int
    max_tokens: int
    checkpoint: Checkpoint | None = None
    through_block: int = 0
    model: str = ""
    revision: int = 0  # the config revision it was assembled from
    # The game's tools among `tools` (their definitions, as kept).
    game_tools: list[dict] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        """Everything the model is given: what the engine weighs against
        maxTokens (compaction, the fit of a message, a turn's holds)."""
        return self.system_tokens + self.block_tokens + self.message_tokens + self.tool_tokens

    @cached_property
    def tool_tokens(self) -> int:
        """The offered tools' definitions, as the model's provider sends them."""
        return tool_tokens(self.model, self.tools, self.game_tools)

    def tokens(self) -> dict:
        """Every part the model is given, counted; `estimate` says whether
        the counts are the model's own tokenizer's or cl100k's guess at them."""
        return {
            "system": self.system_tokens,
            "contextBlock": self.block_tokens,
            "messages": self.message_tokens,
            "tools": self.tool_tokens,
            "total": self.total_tokens,
            "maxTokens": self.max_tokens,
            "estimate": not counts_are_exact(self.model),
            "tokenizer": TOKENIZER,
        }


# Speed: the ORM building this read at every turn's end while an agent's window is full; guarded by bench/paired.py --past-window.
_NEWEST_CHECKPOINT = sql.Compiled(
    lambda agent_id: Checkpoint.objects.filter(agent_id=agent_id).order_by("-id")[:1], agent_id=-0x5EED_0002
)


def current_checkpoint(agent: Agent) -> Checkpoint | None:
    return _NEWEST_CHECKPOINT.first(agent_id=agent.pk)


@dataclass(frozen=True)
class Start:
    """What a turn's start read under the agent's row lock: the id of the
    checkpoint in force (None: the agent has none yet) and the turn's block
    number (None: a transient turn)."""

    checkpoint_id: int | None
    block_number: int | None


@dataclass(frozen=True)
class _Verbatim:
    """The ended verbatim blocks after one checkpoint, as messages."""

    checkpoint_id: int | None
    last_number: int
    messages: tuple
    tokens: int


class _Recent:
    """Per process, bounded and thread-safe: the least recently used go.

    It holds each agent's verbatim blocks already turned into messages, so
    a send reads and decodes only the blocks that ended since the last one
    — sound because an ended block never changes, except for being folded,
    which only a new checkpoint does, and a new checkpoint starts a fresh
    entry — and checkpoints by id (a checkpoint is never changed)."""

    def __init__(self, size: int = 512):
        self.size = size
        self.entries: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key) -> _Verbatim | None:
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
            return entry

    def put(self, key, entry: _Verbatim) -> None:
        with self.lock:
            self.entries[key] = entry
            self.entries.move_to_end(key)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)


# Speed: reading and decoding old blocks and checkpoints on every send; guarded by bench/send_overhead.py (10,000 ÷ 0 blocks).
_verbatim_cache = _Recent()
_checkpoints = _Recent()


def _checkpoint_in_force(agent: Agent, start: Start | None) -> Checkpoint | None:
    if start is None:
        return current_checkpoint(agent)
    if start.checkpoint_id is None:
        return None
    key = (agent.pk, agent.created_at, start.checkpoint_id)
    checkpoint = _checkpoints.get(key)
    if checkpoint is None:
        checkpoint = Checkpoint.objects.filter(agent=agent, pk=start.checkpoint_id).first()
        if checkpoint is None:  # not expected: checkpoints go only with their agent
            return current_checkpoint(agent)
        _checkpoints.put(key, checkpoint)
    return checkpoint


def _verbatim(agent: Agent, checkpoint: Checkpoint | None, block_number: int | None = None) -> _Verbatim:
    """The ended verbatim blocks after `checkpoint`. With the running turn's
    `block_number`, read nothing when this process already holds every
    block before it (the agent's other blocks have all ended: one turn
    runs at a time)."""
    checkpoint_id = checkpoint.pk if checkpoint else None
    through = checkpoint.through_block if checkpoint else 0
    # created_at with the id: a database that reuses ids (SQLite after a
    # flush) cannot hand one agent another's history.
    key = (agent.pk, agent.created_at)
    cached = _verbatim_cache.get(key)
    if cached is None or cached.checkpoint_id != checkpoint_id:
        cached = _Verbatim(checkpoint_id, through, (), 0)
    if block_number is not None and cached.last_number == block_number - 1:
        if _verbatim_cache.get(key) is not cached:
            _verbatim_cache.put(key, cached)  # a fresh one: the agent's first block after its checkpoint
        return cached
    rows = (
        Block.objects.filter(agent=agent, number__gt=cached.last_number, folded=False)
        .order_by("number")
        .values_list("number", "status", "entries", "tokens")
    )
    messages, tokens, last = list(cached.messages), cached.tokens, cached.last_number
    for number, status, entries, block_tokens in rows:
        if status not in ENDED_STATUSES:
            break  # the running turn's block: the newest, and not yet history
        messages.extend(entries_to_messages(entries))
        tokens += block_tokens
        last = number
    fresh = _Verbatim(checkpoint_id, last, tuple(messages), tokens)
    if last != cached.last_number or cached is not _verbatim_cache.get(key):
        _verbatim_cache.put(key, fresh)
    return fresh


def verbatim_extend(
    agent: Agent, checkpoint: Checkpoint | None, number: int, entries: list, tokens: int
) -> None:
    """Block `number`, just ended with `entries`, joins this process's
    verbatim blocks of the agent when they run up to the block before it:
    the agent's next send then reads no block."""
    key = (agent.pk, agent.created_at)
    cached = _verbatim_cache.get(key)
    checkpoint_id = checkpoint.pk if checkpoint else None
    if cached is None or cached.checkpoint_id != checkpoint_id or cached.last_number != number - 1:
        return
    messages = cached.messages + tuple(entries_to_messages(entries))
    _verbatim_cache.put(key, _Verbatim(checkpoint_id, number, messages, cached.tokens + tokens))


def context_assemble(agent: Agent, *, transient: bool = False, start: Start | None = None) -> Context:
    """Everything the agent's next model call is given, before the new
    message: ended verbatim blocks after the checkpoint, in order. A turn
    that has just started passes what its `start` read, which spares the
    reads this process can answer itself."""
    checkpoint = _checkpoint_in_force(agent, start)
    verbatim = _verbatim(agent, checkpoint, start.block_number if start else None)
    return _context(
        agent, agent.revision, checkpoint, list(verbatim.messages), verbatim.tokens, transient=transient
    )


def context_at_block(agent: Agent, block: Block) -> Context:
    """What `block`'s first model call was given: the config revision and
    the checkpoint it recorded, the verbatim blocks between that checkpoint
    and it, and its player's message. Raises `NotRecorded` for a block that
    recorded no revision."""
    config = AgentRevision.objects.filter(agent=agent, number=block.revision).first()
    if block.revision is None or config is None:
        raise NotRecorded(
            f"Block {block.number} of agent '{agent.name}' did not record what its model was given "
            "(it was played before the studio kept that, or its turn's process stopped)."
        )
    checkpoint = block.checkpoint
    rows = Block.objects.filter(
        agent=agent, number__gt=checkpoint.through_block if checkpoint else 0, number__lt=block.number
    ).values_list("entries", "tokens")
    messages, tokens = [], 0
    for entries, block_tokens in rows.order_by("number"):
        messages.extend(entries_to_messages(entries))
        tokens += block_tokens
    first = block.entries[:1]  # the player's message
    messages.extend(entries_to_messages(first))
    return _context(config, block.revision, checkpoint, messages, tokens + entries_tokens(first))


def offered_tools(config: AgentConfig, *, transient: bool = False) -> tuple[list[str], list[dict]]:
    """The tools a model call of an agent with `config` is offered — the
    memory tools when memory is on, then the game's own — and the game's
    tools' definitions. A transient send is offered none: it leaves no
    trace, and a call that changes the game would be one."""
    if transient:
        return [], []
    games = list(config.tools or ())
    return [*(MEMORY_TOOLS if config.memory_enabled else ()), *(tool["name"] for tool in games)], games


def fixed_tokens(agent: Agent, *, transient: bool = False) -> int:
    """What every model call of the agent's sends carries before any
    history: its system prompt and the tools it is offered."""
    names, game_tools = offered_tools(agent, transient=transient)
    return agent.system_tokens + tool_tokens(agent.model, names, game_tools)


class NotRecorded(Conflict):
    code = "history_not_recorded"


def _context(
    config: AgentConfig,
    revision: int,
    checkpoint: Checkpoint | None,
    messages: list[dict],
    message_tokens: int,
    *,
    transient: bool = False,
) -> Context:
    names, game_tools = offered_tools(config, transient=transient)
    return Context(
        system=config.system_prompt,
        context_block=checkpoint.context_block if checkpoint else None,
        messages=messages,
        tools=names,
        game_tools=game_tools,
        system_tokens=config.system_tokens,
        block_tokens=checkpoint.block_tokens if checkpoint else 0,
        message_tokens=message_tokens,
        max_tokens=config.max_tokens,
        checkpoint=checkpoint,
        through_block=checkpoint.through_block if checkpoint else 0,
        model=config.model,
        revision=revision,
    )
