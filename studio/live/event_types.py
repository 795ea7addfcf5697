"""The catalogue of live events: every message a listener of an agent's
stream can receive, one shape each (its fields, and in its docstring when
it is sent) and one builder each (`budget.low` has one per trigger). Code
that sends an event builds it here; `studio.live.events` refuses to publish
anything whose type is not here or whose fields are not its shape's.

Published events go into the agent's stream: each also carries `seq` and
`at`, stamped as it is sent. A few messages go to one listener only (a
WebSocket's `hello`, `resync`, an `error` before a stream ends): they carry
no `seq`.

`python -m studio.live.event_types` prints the README's event table;
`python -m studio.live.event_types README.md` writes it between the file's
`<!-- events:begin -->` and `<!-- events:end -->` markers.
"""

import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

# --- turns ------------------------------------------------------------------------------


class TurnStarted(TypedDict):
    """A turn began running (a queued one, once the turns before it ended); `block` is null for a transient turn."""

    type: Literal["turn.started"]
    agent: str
    turnId: str
    block: int | None
    transient: bool


class ToolCall(TypedDict):
    """The model called a tool and the turn recorded the call with its result; a long result or arguments are
    cut, `cut` saying so (`{"block", "result"?, "arguments"?}`: the block that keeps them whole, their lengths).
    On a replay's copy, a call of a game tool the original never made is marked `notInOriginal`."""

    type: Literal["tool_call"]
    agent: str
    turnId: str
    name: str
    arguments: Any
    result: str
    isError: bool
    cut: NotRequired[dict]
    notInOriginal: NotRequired[bool]


class ToolRequested(TypedDict):
    """The model called a tool the game runs: the turn waits for the game's answer to `callId`
    (`POST …/turns/{turnId}/tool-results`) until `deadline`, then tells the model the game did not answer.
    Long arguments are cut, as a `tool_call`'s (`cut`: `{"block", "arguments"}`); the turn's
    `pendingToolCalls` (`GET …/turns/{turnId}`) carry them whole."""

    type: Literal["tool.requested"]
    agent: str
    turnId: str
    callId: str
    name: str
    arguments: Any
    deadline: str
    cut: NotRequired[dict]


class ToolAnswered(TypedDict):
    """A call of a game tool has its result: the game's (`by` `game`), or an error because its deadline passed
    (`deadline`) or the turn ended first (`turn_ended`); a long result is cut, as a `tool_call`'s."""

    type: Literal["tool.answered"]
    agent: str
    turnId: str
    callId: str
    name: str
    result: str
    isError: bool
    by: Literal["game", "deadline", "turn_ended"]
    cut: NotRequired[dict]


class ReplyDelta(TypedDict):
    """The next piece of a reply as the model writes it; joined, the deltas after a turn's last `tool_call` are
    its reply."""

    type: Literal["reply.delta"]
    agent: str
    turnId: str
    text: str


class TurnFinished(TypedDict):
    """A turn ended, its last event; `turn` is the turn as `GET …/turns/{id}` answered it then."""

    type: Literal["turn.finished"]
    agent: str
    turnId: str
    status: Literal["completed", "cancelled", "failed"]
    block: int | None
    transient: bool
    reply: str
    error: str | None
    cost: dict
    turn: dict


# --- memories, compactions, checkpoints -------------------------------------------------


class MemoryChanged(TypedDict):
    """A memory was written, opened, closed or deleted, by a turn's tool call (`turnId`) or a compaction
    (`turnId` null)."""

    type: Literal["memory.changed"]
    agent: str
    name: str
    change: Literal["created", "updated", "opened", "closed", "deleted"]
    by: Literal["agent", "compactor"]
    turnId: str | None


class _Compaction(TypedDict):
    type: str
    agent: str
    compactionId: str
    reason: Literal["threshold", "forced", "manual"]
    status: Literal["queued", "running", "done", "failed"]
    error: str | None
    waitingForCredits: bool
    throughBlock: int | None


class CompactionQueued(_Compaction):
    """A compaction was asked for (the context passed its threshold, the block window, by hand), or is
    queued again to wait for credits (`waitingForCredits`)."""

    type: Literal["compaction.queued"]


class CompactionStarted(_Compaction):
    """A compaction began folding history into a checkpoint."""

    type: Literal["compaction.started"]


class CompactionFinished(_Compaction):
    """A compaction ended: `done` with the checkpoint's `throughBlock`, or `failed` after its last attempt."""

    type: Literal["compaction.finished"]


class CheckpointWritten(TypedDict):
    """A checkpoint was written, by a compaction or forced by the block window; the context now starts from it."""

    type: Literal["checkpoint.written"]
    agent: str
    kind: Literal["compaction", "forced"]
    throughBlock: int


# --- money ------------------------------------------------------------------------------


class BudgetLow(TypedDict):
    """A charge passed 80% of the monthly cap (once a month), or took the balance below the low-balance alert;
    sent to each of the game's agents."""

    type: Literal["budget.low"]
    trigger: Literal["monthlyCap", "lowBalanceAlert"]
    balance: str
    agent: str | None
    monthlyCap: NotRequired[str]
    monthSpent: NotRequired[str]
    lowBalanceAlert: NotRequired[str]


# --- replays ----------------------------------------------------------------------------


class ReplayProgress(TypedDict):
    """A replay of this agent played one more block (`played` of `total`)."""

    type: Literal["replay.progress"]
    agent: str
    replayId: str
    block: int
    played: int
    total: int


class ReplayFinished(TypedDict):
    """A replay of this agent ended: completed, failed or cancelled."""

    type: Literal["replay.finished"]
    agent: str
    replayId: str
    status: Literal["completed", "failed", "cancelled"]


# --- to one listener --------------------------------------------------------------------


class Hello(TypedDict):
    """A WebSocket's first message, once it is accepted (to that listener only); `seq` is
    where it starts: the `since` it gave, else the agent's newest event (null: none yet),
    what to resume from should it drop before hearing one."""

    type: Literal["hello"]
    agent: str
    game: str
    seq: int | None


class Resync(TypedDict):
    """The events after a WebSocket's `since` are no longer kept: read again through the API, then carry on from
    `seq` (to that listener only)."""

    type: Literal["resync"]
    seq: int | None
    message: str


class Error(TypedDict):
    """Why a stream is refused or ends (a revoked key, a bad `since`, …), just before it closes (to that listener
    only)."""

    type: Literal["error"]
    code: str
    message: str


PUBLISHED = (
    TurnStarted,
    ToolCall,
    ToolRequested,
    ToolAnswered,
    MemoryChanged,
    ReplyDelta,
    TurnFinished,
    CompactionQueued,
    CompactionStarted,
    CheckpointWritten,
    CompactionFinished,
    BudgetLow,
    ReplayProgress,
    ReplayFinished,
)
TO_ONE_LISTENER = (Hello, Resync, Error)
# What a turn's server-sent events can be: the turn's own events, and the
# error that ends a stream early.
TURN_STREAM = (
    TurnStarted,
    ToolCall,
    ToolRequested,
    ToolAnswered,
    MemoryChanged,
    ReplyDelta,
    TurnFinished,
    Error,
)


def type_name(shape) -> str:
    return typing.get_args(typing.get_type_hints(shape)["type"])[0]


# The catalogue: each event type's name and its shape.
CATALOGUE: dict[str, type] = {type_name(shape): shape for shape in PUBLISHED + TO_ONE_LISTENER}
_PUBLISHED_NAMES = frozenset(type_name(shape) for shape in PUBLISHED)
_KEYS = {
    name: (shape.__required_keys__, shape.__required_keys__ | shape.__optional_keys__)
    for name, shape in CATALOGUE.items()
}


class NotInCatalogue(ValueError):
    """An event whose type is not a published one, or whose fields are not its shape's."""


def checked(event: dict) -> dict:
    """`event`, once its type is a published one and its fields are its
    shape's (before it is stamped); NotInCatalogue otherwise."""
    name = event.get("type")
    if name not in _PUBLISHED_NAMES:
        raise NotInCatalogue(f"{name!r} is not a published event type in studio/live/event_types.py")
    required, allowed = _KEYS[name]
    if not required <= event.keys() <= allowed:
        raise NotInCatalogue(f"{name} has fields {sorted(event)}; its shape's are {sorted(allowed)}")
    return event


def problems(event: dict, *, stamped: bool = True) -> list[str]:
    """What is wrong with `event` as received (`stamped`: with `seq` and
    `at`, as published events are): an unknown type, fields missing or
    unknown, values of the wrong kind. Empty when it fits its shape."""
    shape = CATALOGUE.get(event.get("type"))
    if shape is None:
        return [f"unknown type {event.get('type')!r}"]
    hints, required = typing.get_type_hints(shape), set(shape.__required_keys__)
    if stamped and shape in PUBLISHED:
        hints, required = {**hints, "seq": int, "at": str}, required | {"seq", "at"}
    found = [f"missing {key}" for key in sorted(required - event.keys())]
    found += [f"unknown field {key}" for key in sorted(event.keys() - hints.keys())]
    found += [
        f"{key}={event[key]!r} is not {_kind(hints[key])}"
        for key in sorted(event.keys() & hints.keys())
        if not _fits(event[key], hints[key])
    ]
    return found


def _fits(value, hint) -> bool:
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin is Literal:
        return value in typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


JSON_NAMES = {
    str: "string",
    int: "integer",
    bool: "boolean",
    dict: "object",
    list: "array",
    type(None): "null",
}


def _kind(hint) -> str:
    if hint is Any:
        return "any"
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "/".join(f'"{value}"' for value in typing.get_args(hint))
    if origin in (types.UnionType, typing.Union):
        return "/".join(_kind(arg) for arg in typing.get_args(hint))
    return JSON_NAMES[hint]


def json_schema(shape) -> dict:
    """The event's shape as an OpenAPI 3.0 schema (the stamp `seq` and `at`
    included but for the messages to one listener, which have none)."""
    hints = typing.get_type_hints(shape)
    properties = {key: _schema_of(hint) for key, hint in hints.items()}
    required = [key for key in hints if key not in shape.__optional_keys__]
    if shape not in TO_ONE_LISTENER:
        properties |= {"seq": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}}
        required += ["seq", "at"]
    return {
        "type": "object",
        "description": " ".join(shape.__doc__.split()),
        "properties": properties,
        "required": required,
    }


def _schema_of(hint) -> dict:
    if hint is Any:
        return {}
    origin = typing.get_origin(hint)
    if origin is Literal:
        values = typing.get_args(hint)
        return {"type": JSON_NAMES[type(values[0])], "enum": list(values)}
    if origin in (types.UnionType, typing.Union):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        schema = _schema_of(args[0]) if len(args) == 1 else {"oneOf": [_schema_of(arg) for arg in args]}
        return {**schema, "nullable": True} if nullable else schema
    return {"type": JSON_NAMES[hint]}


# --- builders ---------------------------------------------------------------------------


def turn_started(*, agent: str, turn_id: str, block: int | None, transient: bool) -> TurnStarted:
    return TurnStarted(type="turn.started", agent=agent, turnId=turn_id, block=block, transient=transient)


def tool_call(
    *,
    agent: str,
    turn_id: str,
    name: str,
    arguments,
    result: str,
    isError: bool,
    cut: dict | None = None,
    notInOriginal: bool = False,
) -> ToolCall:
    """From a tool call as `agents.wire.tool_call_shown` shows it."""
    event = ToolCall(
        type="tool_call",
        agent=agent,
        turnId=turn_id,
        name=name,
        arguments=arguments,
        result=result,
        isError=isError,
    )
    if cut is not None:
        event["cut"] = cut
    if notInOriginal:
        event["notInOriginal"] = True
    return event


def tool_requested(
    *, agent: str, turn_id: str, call_id: str, name: str, arguments, deadline: str, cut=None
) -> ToolRequested:
    event = ToolRequested(
        type="tool.requested",
        agent=agent,
        turnId=turn_id,
        callId=call_id,
        name=name,
        arguments=arguments,
        deadline=deadline,
    )
    if cut is not None:
        event["cut"] = cut
    return event


def tool_answered(
    *, agent: str, turn_id: str, call_id: str, name: str, result: str, is_error: bool, by: str, cut=None
) -> ToolAnswered:
    event = ToolAnswered(
        type="tool.answered",
        agent=agent,
        turnId=turn_id,
        callId=call_id,
        name=name,
        result=result,
        isError=is_error,
        by=by,
    )
    if cut is not None:
        event["cut"] = cut
    return event


def reply_delta(*, agent: str, turn_id: str, text: str) -> ReplyDelta:
    return ReplyDelta(type="reply.delta", agent=agent, turnId=turn_id, text=text)


def turn_finished(*, agent: str, turn: dict) -> TurnFinished:
    """From `turn`, the turn as the API answers it (`agents.wire.turn_wire`):
    the event repeats its status, reply, error and cost at the top."""
    return TurnFinished(
        type="turn.finished",
        agent=agent,
        turnId=turn["id"],
        status=turn["status"],
        block=turn["block"],
        transient=turn["transient"],
        reply=turn["reply"],
        error=turn.get("error"),
        cost=turn["cost"],
        turn=turn,
    )


def memory_changed(*, agent: str, name: str, change: str, by: str, turn_id: str | None) -> MemoryChanged:
    return MemoryChanged(type="memory.changed", agent=agent, name=name, change=change, by=by, turnId=turn_id)


def _compaction(shape):
    def build(
        *,
        agent: str,
        compaction_id: str,
        reason: str,
        status: str,
        error: str | None,
        waiting_for_credits: bool,
        through_block: int | None,
    ):
        return shape(
            type=type_name(shape),
            agent=agent,
            compactionId=compaction_id,
            reason=reason,
            status=status,
            error=error,
            waitingForCredits=waiting_for_credits,
            throughBlock=through_block,
        )

    build.__name__ = type_name(shape).replace(".", "_")
    return build


compaction_queued = _compaction(CompactionQueued)
compaction_started = _compaction(CompactionStarted)
compaction_finished = _compaction(CompactionFinished)


def checkpoint_written(*, agent: str, kind: str, through_block: int) -> CheckpointWritten:
    return CheckpointWritten(type="checkpoint.written", agent=agent, kind=kind, throughBlock=through_block)


def budget_low_cap(*, agent: str | None, monthly_cap: str, month_spent: str, balance: str) -> BudgetLow:
    """`budget.low` for the month's spend passing 80% of the cap."""
    return BudgetLow(
        type="budget.low",
        trigger="monthlyCap",
        monthlyCap=monthly_cap,
        monthSpent=month_spent,
        balance=balance,
        agent=agent,
    )


def budget_low_balance(*, agent: str | None, low_balance_alert: str, balance: str) -> BudgetLow:
    """`budget.low` for the balance falling below the low-balance alert."""
    return BudgetLow(
        type="budget.low",
        trigger="lowBalanceAlert",
        lowBalanceAlert=low_balance_alert,
        balance=balance,
        agent=agent,
    )


def replay_progress(*, agent: str, replay_id: str, block: int, played: int, total: int) -> ReplayProgress:
    return ReplayProgress(
        type="replay.progress", agent=agent, replayId=replay_id, block=block, played=played, total=total
    )


def replay_finished(*, agent: str, replay_id: str, status: str) -> ReplayFinished:
    return ReplayFinished(type="replay.finished", agent=agent, replayId=replay_id, status=status)


def hello(*, agent: str, game: str, seq: int | None) -> Hello:
    return Hello(type="hello", agent=agent, game=game, seq=seq)


def resync(*, seq: int | None, message: str) -> Resync:
    return Resync(type="resync", seq=seq, message=message)


def error(*, code: str, message: str) -> Error:
    return Error(type="error", code=code, message=message)


# --- the README's table -----------------------------------------------------------------

BEGIN, END = "<!-- events:begin -->", "<!-- events:end -->"


def markdown_table(shapes=None) -> str:
    """The event table the README shows between its markers: every event,
    or those of `shapes`."""
    rows = ["| type | fields | when it is sent |", "| --- | --- | --- |"]
    for shape in shapes or CATALOGUE.values():
        name, hints = type_name(shape), typing.get_type_hints(shape)
        optional = shape.__optional_keys__
        fields = ", ".join(
            f"`{key}`{'?' if key in optional else ''} {_kind(hint)}"
            for key, hint in hints.items()
            if key != "type"
        )
        when = " ".join(shape.__doc__.split())
        rows.append(f"| `{name}` | {fields} | {when} |")
    return "\n".join(rows) + "\n"


def readme_block(text: str) -> str:
    """What stands between the markers in `text`."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n") + "\n"


def readme_written(text: str) -> str:
    """`text` with the generated table between its markers."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return f"{text[:start]}\n{markdown_table()}{text[end:]}"


if __name__ == "__main__":
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
        path.write_text(readme_written(path.read_text()))
    else:
        sys.stdout.write(markdown_table())
