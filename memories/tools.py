"""The agent's three memory tools, as the model calls them.

Each tool parses the arguments the model sent, asks `memories.store` for
the change (the store keeps every rule: who may write what, and the
limits) and returns a `ToolResult`: the text the model reads next, and
whether it is an error. Errors are results, not exceptions — the turn goes
on and the model can act on the sentence, written here from the facts the
store refused with. A tool runs inside the caller's transaction, under the
store lock.
"""

from dataclasses import dataclass

from agents.models import Agent
from agents.providers.base import UnparsedArguments

from . import store

OPEN_MEMORY = "open_memory"
CLOSE_MEMORY = "close_memory"
DELETE_MEMORY = "delete_memory"
MEMORY_TOOLS = (OPEN_MEMORY, CLOSE_MEMORY, DELETE_MEMORY)

NAME_MAX = 64
DESCRIPTION_MAX = 300
# The most characters of names an error result lists.
LISTED_MAX_CHARS = 2_000  # store.NAMES_LISTED_MOST reads no more names than this can show


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
        if name == OPEN_MEMORY and isinstance(arguments.get("name"), str):
            # Reading a memory that is open already writes nothing: no lock.
            memory = store.memory_open_already(agent, store.memory_name(arguments["name"].strip()))
            if memory is not None:
                return ToolResult(_already_open(memory))
        agent = store.lock_store(agent)
        return ToolResult(tool(agent, arguments, turn_id))
    except _Refusal as refusal:
        return ToolResult(str(refusal), is_error=True)
    except store.StoreError as refused:
        return ToolResult(_refused_text(name, arguments, refused), is_error=True)


# --- arguments -----------------------------------------------------------------


def _not_an_object(tool: str, arguments) -> str:
    example = 'like {"name": "quest"}'
    if isinstance(arguments, UnparsedArguments):
        # Why they could not be read, as the provider found it: the text
        # is not parsed again (it may be nested past any parser's depth).
        return f"The arguments for {tool} {arguments.reason}. Send an object, {example}."
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
    name = store.memory_name(_text_arg(arguments, "name", tool, required=True).strip())
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


# --- the tools ---------------------------------------------------------------------


def _open(agent: Agent, arguments: dict, turn_id) -> str:
    name = _name_arg(arguments, OPEN_MEMORY)
    opened = store.memory_open(agent=agent, name=name, turn_id=turn_id)
    memory = opened.memory
    if opened.was_open:
        return _already_open(memory)
    return (
        f"Memory '{name}' is now open ({memory.tokens} tokens; {opened.open_tokens} of "
        f"{agent.max_open_tokens} open tokens in use). Its content:\n\n{memory.content}"
    )


def _already_open(memory) -> str:
    # Its content is not given again: the agent has it, in the result that
    # opened it or in its context block's open memories, and a model that
    # opens it over and over would otherwise write it into history each time.
    return (
        f"Memory '{memory.name}' is already open ({memory.tokens} tokens): its content is in your context, "
        "where you opened it or among the open memories at its head."
    )


def _close(agent: Agent, arguments: dict, turn_id) -> str:
    name = _name_arg(arguments, CLOSE_MEMORY)
    description = _description_arg(arguments)
    content = _text_arg(arguments, "content", CLOSE_MEMORY, required=False)
    closed = store.memory_close(
        agent=agent, name=name, description=description, content=content, turn_id=turn_id
    )
    if closed.created:
        return f"Created memory '{name}' and saved it closed. open_memory reads it when you need it."
    if closed.changed:
        return f"Saved memory '{name}' and closed it."
    return f"Closed memory '{name}' (nothing in it changed)."


def _delete(agent: Agent, arguments: dict, turn_id) -> str:
    name = _name_arg(arguments, DELETE_MEMORY)
    store.memory_delete(agent=agent, name=name, turn_id=turn_id)
    return f"Deleted memory '{name}' for good."


_TOOLS = {OPEN_MEMORY: _open, CLOSE_MEMORY: _close, DELETE_MEMORY: _delete}


# --- what the model reads when the store refuses ------------------------------------------


def _refused_text(tool: str, arguments: dict, refused: store.StoreError) -> str:
    match refused:
        case store.NoSuchMemory():
            return f"There is no memory named '{refused.name}'. {_existing_names(refused.existing, refused.total)}"
        case store.MemoryIsClosed() if tool == DELETE_MEMORY:
            return (
                f"Memory '{refused.name}' is closed: nothing is deleted unseen. Open it with open_memory "
                "first, then delete it."
            )
        case store.MemoryIsClosed():
            return (
                f"Memory '{refused.name}' is closed, so it cannot be written: nothing is overwritten unseen. "
                f"Open it with open_memory first, then close_memory it with your changes."
            )
        case store.NewMemoryIncomplete():
            return (
                f"There is no memory named '{refused.name}' yet, and a new memory needs both a description "
                f"and content: {' and '.join(refused.missing)} is missing."
            )
        case store.OverOpenBudget():
            return _over_budget_text(refused)
        case store.OverHeadings():
            return (
                f"Cannot open '{refused.name}': with it, the headings (name and description) of the "
                f"{refused.count} open memories would take {refused.tokens} tokens of your context, over the "
                f"{refused.budget} kept for them. Close one of the open memories first: "
                f"{_open_listing(refused.open_memories)}."
            )
        case store.NeverOpenable():
            return _never_openable_text(refused)
        case store.OverStoreCap():
            return (
                f"Cannot save '{refused.name}': the memory store is {refused.current:,} bytes and this write "
                f"would make it {refused.after:,} bytes, over the cap of {refused.cap:,} bytes. Write "
                "less, or delete a memory you no longer need (open it, then delete_memory)."
            )
    return f"{tool} was refused: {refused.message}."


def _existing_names(existing: list[tuple[int, str]], total: int) -> str:
    if not existing:
        return (
            "There are no memories yet: close_memory with a new name, a description and content creates one."
        )
    # The most recently written that fit, in the order they were made.
    shown, _ = _within([name for _, name in existing])
    more = total - len(shown)
    listed = "The memories that exist are: " + ", ".join(name for _, name in sorted(existing[: len(shown)]))
    if total > store.NAMES_COUNTED_MOST:
        return listed + f", and over {store.NAMES_COUNTED_MOST - len(shown):,} more written longer ago."
    return listed + (f", and {more:,} more written longer ago." if more else ".")


def _open_listing(open_memories: list[tuple[str, int]]) -> str:
    """The open memories with their tokens, the largest first, within
    LISTED_MAX_CHARS, and how many more are open."""
    largest = sorted(open_memories, key=lambda memory: -memory[1])
    shown, more = _within([f"{name} ({tokens} tokens)" for name, tokens in largest])
    return ", ".join(shown) + (f", and {more:,} more open" if more else "")


def _within(items: list[str]) -> tuple[list[str], int]:
    """The first of `items` that fit in LISTED_MAX_CHARS listed together,
    and how many are left out: a model steered into asking again and again
    reads, and its block keeps, no more."""
    shown, length = [], 0
    for item in items:
        length += len(item) + 2
        if length > LISTED_MAX_CHARS:
            break
        shown.append(item)
    return shown, len(items) - len(shown)


def _over_budget_text(refused: store.OverOpenBudget) -> str:
    listing = _open_listing(refused.open_memories)
    advice = (
        f"Close one of the open memories first: {listing}."
        if listing
        else "Nothing else is open: this memory alone is larger than the budget."
    )
    return (
        f"Cannot open '{refused.name}': it needs {refused.tokens} tokens and {refused.in_use} are already "
        f"open, which makes {refused.needed}, over the budget of {refused.budget} "
        f"(maxOpenTokens). {advice}"
    )


def _never_openable_text(refused: store.NeverOpenable) -> str:
    return (
        f"Cannot save '{refused.name}': its content is {refused.tokens} tokens, more than the whole open "
        f"budget of {refused.budget} (maxOpenTokens), so it could never be opened again. Keep it shorter, "
        "or split it into several memories."
    )
