"""The agent's three memory tools, as the model calls them.

Each tool takes the arguments the model sent and returns a `ToolResult`:
text the model reads next, and whether it is an error. Errors are results,
not exceptions — the turn goes on and the model can act on the sentence.
A tool runs inside the caller's transaction, under the store lock (see
`memories.store` for who may write what, and the limits).
"""

import json
from dataclasses import dataclass

from agents.models import Agent
from agents.providers.base import UnparsedArguments
from studio.tokens import count_tokens

from . import store
from .models import Change, Memory, Writer

OPEN_MEMORY = "open_memory"
CLOSE_MEMORY = "close_memory"
DELETE_MEMORY = "delete_memory"
MEMORY_TOOLS = (OPEN_MEMORY, CLOSE_MEMORY, DELETE_MEMORY)

NAME_MAX = 64
DESCRIPTION_MAX = 300


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False


class _Refusal(Exception):
    """A tool error: its message goes back to the model as the result."""


def tool_run(*, agent: Agent, name: str, arguments, turn_id=None) -> ToolResult:
    """Run memory tool `name`. Call inside `transaction.atomic()`."""
    tool = _TOOLS.get(name)
    if tool is None:
        return ToolResult(
            f"There is no tool named '{name}'. The memory tools are: {', '.join(MEMORY_TOOLS)}.",
            is_error=True,
        )
    try:
        if not isinstance(arguments, dict):
            raise _Refusal(_not_an_object(name, arguments))
        agent = store.lock_store(agent)
        return ToolResult(tool(agent, arguments, turn_id))
    except _Refusal as refusal:
        return ToolResult(str(refusal), is_error=True)


# --- arguments -----------------------------------------------------------------


def _not_an_object(tool: str, arguments) -> str:
    example = 'like {"name": "quest"}'
    if isinstance(arguments, UnparsedArguments):
        try:
            json.loads(arguments)
        except ValueError as error:
            return f"The arguments for {tool} were not valid JSON ({error}). Send an object, {example}."
    return f"{tool} takes an object of arguments, {example}."


def _text_arg(arguments: dict, key: str, tool: str, *, required: bool) -> str | None:
    value = arguments.get(key)
    if value is None:
        if required:
            raise _Refusal(f"{tool} needs '{key}'.")
        return None
    if not isinstance(value, str):
        raise _Refusal(f"'{key}' must be a string, not {type(value).__name__}.")
    return value


def _name_arg(arguments: dict, tool: str) -> str:
    name = _text_arg(arguments, "name", tool, required=True).strip()
    if not name:
        raise _Refusal(f"{tool} needs a non-empty 'name'.")
    if len(name) > NAME_MAX or "\n" in name or "\r" in name:
        raise _Refusal(f"A memory name is one line of at most {NAME_MAX} characters, like 'quest'.")
    return name


def _description_arg(arguments: dict) -> str | None:
    description = _text_arg(arguments, "description", CLOSE_MEMORY, required=False)
    if description is None:
        return None
    description = description.strip()
    if not description:
        raise _Refusal("'description' cannot be empty: say in one line what the memory holds.")
    if len(description) > DESCRIPTION_MAX or "\n" in description or "\r" in description:
        raise _Refusal(
            f"'description' is one line of at most {DESCRIPTION_MAX} characters saying what the "
            "memory holds and when to open it."
        )
    return description


def _existing_names(agent: Agent) -> str:
    names = list(Memory.objects.filter(agent=agent).values_list("name", flat=True))
    if not names:
        return (
            "There are no memories yet: close_memory with a new name, a description and content creates one."
        )
    return "The memories that exist are: " + ", ".join(names) + "."


def _get(agent: Agent, name: str) -> Memory:
    memory = Memory.objects.filter(agent=agent, name=name).first()
    if memory is None:
        raise _Refusal(f"There is no memory named '{name}'. {_existing_names(agent)}")
    return memory


# --- the tools ---------------------------------------------------------------------


def _open(agent: Agent, arguments: dict, turn_id) -> str:
    name = _name_arg(arguments, OPEN_MEMORY)
    memory = _get(agent, name)
    if memory.is_open:
        return f"Memory '{name}' is already open. Its content:\n\n{memory.content}"
    in_use = store.open_tokens(agent)
    needed = in_use + memory.tokens
    if needed > agent.max_open_tokens:
        raise _Refusal(_over_budget_message(agent, memory, in_use, needed))
    before = store.snapshot(memory)
    memory.is_open = True
    # Opening reads, it does not write: who wrote it last, when, and its
    # version stay as they were.
    memory.save(update_fields=["is_open"])
    store.record(
        agent=agent,
        name=name,
        change=Change.OPENED,
        by=Writer.AGENT,
        before=before,
        after=store.snapshot(memory),
        turn_id=turn_id,
    )
    return (
        f"Memory '{name}' is now open ({memory.tokens} tokens; {needed} of "
        f"{agent.max_open_tokens} open tokens in use). Its content:\n\n{memory.content}"
    )


def _over_budget_message(agent: Agent, memory: Memory, in_use: int, needed: int) -> str:
    opened = Memory.objects.filter(agent=agent, is_open=True).values_list("name", "tokens")
    listing = ", ".join(f"{n} ({t} tokens)" for n, t in opened)
    advice = (
        f"Close one of the open memories first: {listing}."
        if listing
        else "Nothing else is open: this memory alone is larger than the budget."
    )
    return (
        f"Cannot open '{memory.name}': it needs {memory.tokens} tokens and {in_use} are already "
        f"open, which makes {needed}, over the budget of {agent.max_open_tokens} "
        f"(maxOpenTokens). {advice}"
    )


def _close(agent: Agent, arguments: dict, turn_id) -> str:
    name = _name_arg(arguments, CLOSE_MEMORY)
    description = _description_arg(arguments)
    content = _text_arg(arguments, "content", CLOSE_MEMORY, required=False)
    memory = Memory.objects.filter(agent=agent, name=name).first()
    if memory is None:
        return _create(agent, name, description, content, turn_id)
    if not memory.is_open:
        raise _Refusal(
            f"Memory '{name}' is closed, so it cannot be written: nothing is overwritten unseen. "
            f"Open it with open_memory first, then close_memory it with your changes."
        )
    fields = {}
    if description is not None and description != memory.description:
        fields["description"] = description
    if content is not None and content != memory.content:
        fields["content"] = content
        _check_openable(agent, name, content)
    new_bytes = store.memory_bytes(
        name, fields.get("description", memory.description), fields.get("content", memory.content)
    )
    _check_cap(agent, name, old_bytes=memory.bytes, new_bytes=new_bytes)
    before = store.snapshot(memory)
    if fields:
        store.memory_save(memory, by=Writer.AGENT, is_open=False, **fields)
    else:  # a plain close is not a write
        memory.is_open = False
        memory.save(update_fields=["is_open"])
    change = Change.UPDATED if fields else Change.CLOSED
    store.record(
        agent=agent,
        name=name,
        change=change,
        by=Writer.AGENT,
        before=before,
        after=store.snapshot(memory),
        turn_id=turn_id,
    )
    if fields:
        return f"Saved memory '{name}' and closed it."
    return f"Closed memory '{name}' (nothing in it changed)."


def _create(agent: Agent, name: str, description: str | None, content: str | None, turn_id) -> str:
    if description is None or content is None:
        missing = " and ".join(
            k for k, v in (("description", description), ("content", content)) if v is None
        )
        raise _Refusal(
            f"There is no memory named '{name}' yet, and a new memory needs both a description "
            f"and content: {missing} is missing."
        )
    _check_openable(agent, name, content)
    _check_cap(agent, name, old_bytes=0, new_bytes=store.memory_bytes(name, description, content))
    memory = store.memory_save(
        Memory(agent=agent, name=name, is_open=False),
        by=Writer.AGENT,
        description=description,
        content=content,
    )
    store.record(
        agent=agent,
        name=name,
        change=Change.CREATED,
        by=Writer.AGENT,
        before=None,
        after=store.snapshot(memory),
        turn_id=turn_id,
    )
    return f"Created memory '{name}' and saved it closed. open_memory reads it when you need it."


def _check_cap(agent: Agent, name: str, *, old_bytes: int, new_bytes: int) -> None:
    growth = store.check_growth(agent, old_bytes=old_bytes, new_bytes=new_bytes)
    if growth:
        raise _Refusal(
            f"Cannot save '{name}': the memory store is {growth.current:,} bytes and this write "
            f"would make it {growth.after:,} bytes, over the cap of {growth.cap:,} bytes. Write "
            "less, or delete a memory you no longer need (open it, then delete_memory)."
        )


def _check_openable(agent: Agent, name: str, content: str) -> None:
    # A memory larger than the whole open budget could never be opened again
    # — so never read, written or deleted. Refuse it while it can be fixed.
    tokens = count_tokens(content)
    if tokens > agent.max_open_tokens:
        raise _Refusal(
            f"Cannot save '{name}': its content is {tokens} tokens, more than the whole open "
            f"budget of {agent.max_open_tokens} (maxOpenTokens), so it could never be opened "
            "again. Keep it shorter, or split it into several memories."
        )


def _delete(agent: Agent, arguments: dict, turn_id) -> str:
    name = _name_arg(arguments, DELETE_MEMORY)
    memory = _get(agent, name)
    if not memory.is_open:
        raise _Refusal(
            f"Memory '{name}' is closed: nothing is deleted unseen. Open it with open_memory "
            "first, then delete it."
        )
    before = store.snapshot(memory)
    memory.delete()
    store.record(
        agent=agent,
        name=name,
        change=Change.DELETED,
        by=Writer.AGENT,
        before=before,
        after=None,
        turn_id=turn_id,
    )
    return f"Deleted memory '{name}' for good."


_TOOLS = {OPEN_MEMORY: _open, CLOSE_MEMORY: _close, DELETE_MEMORY: _delete}
