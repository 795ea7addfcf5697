"""What the sync and the async client share, none of it doing I/O: the one
error, the spec's definition-time rule, reading a studio's refusal, when to
try again, server-sent events, and an agent's event handlers with where
its stream has got to."""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Callable
from urllib.parse import quote, unquote

import httpx

from . import _options

log = logging.getLogger("studio_client")

# The studio's defaults (CONTRACT.md): `memory: {}` and an absent `compaction`.
DEFAULT_MAX_OPEN_TOKENS = 4000
DEFAULT_MAX_TOKENS = 32000

# A send waits for its turn to end; the studio ends every turn within its
# deadline (STUDIO_TURN_DEADLINE_SECONDS, 600 by default).
SEND_TIMEOUT_SECONDS = 660.0

# WebSocket close codes after which listening again cannot help.
CLOSE_FOR_GOOD = {
    4400: ("invalid_request", "The studio closed the event stream: the request was not valid."),
    4401: ("unauthenticated", "The studio closed the event stream: the API key is not (or no longer) valid."),
    4404: (
        "agent_not_found",
        "The studio closed the event stream: there is no such agent in the key's game.",
    ),
}
CLOSE_TOO_MANY_STREAMS = 4429


# The codes of a refusal for want of credits: the game's balance (less
# what its running turns hold), its monthly spend cap, or the compaction the
# agent needs before it can be sent to, which the game cannot pay for.
OUT_OF_CREDITS = ("budget_exhausted", "spend_cap_reached", "insufficient_credits")


class StudioError(Exception):
    """What the studio refused, in its words: `status` (the HTTP status;
    None when no answer came), `code`, `message`, `details` (one
    `{"field", "message"}` per problem with the input, or None),
    `retry_after` (seconds, for 429 and 503) and, on every error of a send,
    `idempotency_key`: the send's key, by which `agent.turn_by_idempotency_key`
    finds the turn it made, if it reached the studio."""

    def __init__(
        self,
        status: int | None,
        code: str,
        message: str,
        details: list | None = None,
        retry_after: float | None = None,
        idempotency_key: str | None = None,
    ):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details, self.retry_after = details, retry_after
        self.idempotency_key = idempotency_key

    @property
    def out_of_credits(self) -> bool:
        """The game cannot pay: out of credits, or at its monthly spend cap
        (whichever code says it)."""
        return self.code in OUT_OF_CREDITS

    def of_send(self, idempotency_key: str) -> StudioError:
        """This error as the error of the send under `idempotency_key`: a
        copy with the key (the error of a definition is every send's)."""
        copy = StudioError(
            self.status, self.code, self.message, self.details, self.retry_after, idempotency_key
        )
        copy.__cause__ = self
        return copy

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"

    def __repr__(self) -> str:
        return f"StudioError(status={self.status!r}, code={self.code!r}, message={self.message!r})"


# --- definitions ---------------------------------------------------------------------------


def definition(options: dict | None, agent: str = "") -> dict:
    """The body of `PUT /agents/{name}` for the spec's options, checked
    against the studio's definition schema (names and JSON types: a
    misspelt option gets a did-you-mean) and the spec's definition-time
    rule: with memory on, `memory.maxOpenTokens` must stay below half of
    `compaction.maxTokens`. A breach is the StudioError the studio would
    answer (400 `invalid_definition`), raised here before anything is sent.
    Every other rule is the studio's to check. The game's `tools` go as the
    studio takes them, without what runs them."""
    problems = _options.problems_of(dict(options or {}))
    if problems:
        raise StudioError(400, "invalid_definition", _options.refusal_message(agent, problems), problems)
    body = dict(options or {})
    if body.get("tools") is None:
        body.pop("tools", None)
    else:
        body["tools"] = [sent for sent, _ in tools_of(body["tools"])]
    memory, compaction = body.get("memory"), body.get("compaction") or {}
    if not isinstance(memory, dict) or not isinstance(compaction, dict):
        return body
    max_open = memory.get("maxOpenTokens", DEFAULT_MAX_OPEN_TOKENS)
    max_tokens = compaction.get("maxTokens", DEFAULT_MAX_TOKENS)
    if not (_whole(max_open) and _whole(max_tokens)):
        return body  # the studio names what is wrong with them
    largest = (max_tokens - 1) // 2
    if max_open > largest:
        # The studio's own words (agents/services.py, definition_check).
        raise StudioError(
            400,
            "invalid_definition",
            f"memory.maxOpenTokens ({max_open:,}) must be below half of compaction.maxTokens "
            f"({max_tokens:,}), so {largest:,} at most. Lower memory.maxOpenTokens to {largest:,} "
            f"or raise compaction.maxTokens to {max_open * 2 + 1:,}.",
        )
    return body


def unheeded_definition(name: str, error: BaseException) -> str:
    """What the log is told of a definition that failed while nothing
    waited on it (`ready`, a send): a typo must not pass unseen."""
    said = f"({error.code}): {error.message}" if isinstance(error, StudioError) else f": {error!r}"
    return (
        f"the definition of agent {name!r} failed {said} Nothing waited on the agent's `ready`, "
        "so it is reported here; its next call raises this error."
    )


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- the game's tools ------------------------------------------------------------------------


class Tool:
    """One of the game's tools: what the model is told of it (`name`,
    `description`, `parameters` as a JSON Schema of an object,
    `timeout_seconds`) and `run(args, ctx)`, what does it (None: declared
    here, answered by other game code or its deadline). Calling a Tool calls
    `run`, so a decorated function stays a function."""

    def __init__(
        self,
        name: str,
        *,
        description: str,
        parameters: dict | None = None,
        timeout_seconds: int | None = None,
        run: Callable | None = None,
    ):
        if run is not None and not callable(run):
            raise TypeError(f"tool {name!r}: run must be a function, run(args, ctx) -> result")
        self.name, self.description, self.parameters = name, description, parameters
        self.timeout_seconds, self.run = timeout_seconds, run

    def __call__(self, *args, **kwargs):
        return self.run(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name!r}>"

    def definition(self) -> dict:
        """The tool as a definition sends it."""
        return query(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            timeoutSeconds=self.timeout_seconds,
        )


def tool(
    name: str | None = None,
    *,
    description: str,
    parameters: dict | None = None,
    timeout_seconds: int | None = None,
) -> Callable[[Callable], Tool]:
    """A decorator that makes a function one of the game's tools, named
    after the function unless `name` says:

        @tool(description="Hand the player an item.", parameters={...})
        def give_item(args, ctx): ...

        io.Agent("innkeeper", {"systemPrompt": "…", "tools": [give_item]})
    """

    def made(run: Callable) -> Tool:
        return Tool(
            name or run.__name__,
            description=description,
            parameters=parameters,
            timeout_seconds=timeout_seconds,
            run=run,
        )

    return made


def tools_of(tools) -> list[tuple[dict, Callable | None]]:
    """A definition's `tools` as (what the definition sends, the function
    that runs it or None): each a Tool (from `@tool`) or a dict in the
    studio's shape (`name`, `description`, `parameters`, `timeoutSeconds`),
    with a `run` or without. The rest is the studio's to check."""
    if not isinstance(tools, (list, tuple)):
        raise TypeError("tools is a list of the game's tools: functions made with @tool, or dicts")
    made = []
    for entry in tools:
        if isinstance(entry, Tool):
            made.append((entry.definition(), entry.run))
        elif isinstance(entry, dict):
            run = entry.get("run")
            if run is not None and not callable(run):
                raise TypeError(
                    f"tool {entry.get('name')!r}: run must be a function, run(args, ctx) -> result"
                )
            made.append(({k: v for k, v in entry.items() if k != "run"}, run))
        else:
            raise TypeError(f"tools: {entry!r} is not a tool: make it with @tool, or give a dict")
    return made


def tool_handlers(options: dict) -> dict[str, Callable]:
    """The functions that run the game's tools of a definition, by name."""
    if options.get("tools") is None:
        return {}
    return {sent.get("name"): run for sent, run in tools_of(options["tools"]) if run is not None}


# A thrown error's message is the model's to read: this much of it.
TOOL_ERROR_MAX_CHARS = 4000


def tool_answer(name: str, value) -> dict:
    """What a tool's function returned, as the answer the studio takes:
    text as it is, anything else as JSON (None as `null`); what is not JSON
    is an error saying so."""
    if value is None:
        return {"result": "null"}  # what JSON null reads as
    if isinstance(value, str):
        return {"result": value}
    try:
        json.dumps(value)
    except (TypeError, ValueError) as error:
        return {"error": tool_error_text(name, f"The game's result is not JSON: {error}")}
    return {"result": value}


def tool_error_text(name: str, error) -> str:
    """What a tool's function raised, as the sentence the model reads."""
    text = str(error)
    if not text.strip():
        text = f"{name} failed ({type(error).__name__})."
    return text if len(text) <= TOOL_ERROR_MAX_CHARS else text[: TOOL_ERROR_MAX_CHARS - 1] + "…"


def tool_refused(name: str, error: StudioError) -> dict:
    """The answer that stands for a result the studio would not keep."""
    return {"error": tool_error_text(name, f"The game's result could not be kept: {error.message}")}


def tool_results_path(agent: str, turn_id: str) -> str:
    return agent_path(agent, f"/turns/{quote(str(turn_id), safe='')}/tool-results")


def turn_path(agent: str, turn_id: str) -> str:
    return agent_path(agent, f"/turns/{quote(str(turn_id), safe='')}")


def turn_events_path(agent: str, turn_id: str) -> str:
    """`GET …/turns/{id}/events`: the turn's events again, then live ones, to `turn.finished`."""
    return turn_path(agent, turn_id) + "/events"


# A call's arguments whole were not to be had: the turn waits on it no more.
NOT_WAITED_ON = object()


def is_cut(call: dict) -> bool:
    """Whether `tool.requested` cut the call's arguments (long ones are):
    the turn's pendingToolCalls carry them whole."""
    return "arguments" in (call.get("cut") or {})


def pending_arguments(turn: dict, call_id: str):
    """The arguments of call `call_id` in the turn's pendingToolCalls, whole;
    NOT_WAITED_ON when the turn waits on it no more."""
    for pending in turn.get("pendingToolCalls") or ():
        if pending["callId"] == call_id:
            return pending["arguments"]
    return NOT_WAITED_ON


class ToolContext:
    """What a tool's function is told of the call: `turn_id`, `call_id`,
    `name`, `deadline` (ISO 8601), and `cancelled`, an event set (with
    `cancel_reason`) once the call is no longer waited for — its deadline
    passed, other game code answered it, or the turn ended."""

    def __init__(self, call: dict, cancelled):
        self.turn_id, self.call_id = call["turnId"], call["callId"]
        self.name, self.deadline = call["name"], call.get("deadline")
        self.cancelled = cancelled
        self.cancel_reason: str | None = None

    def __repr__(self) -> str:
        return f"<ToolContext {self.name} {self.call_id}>"


class ToolCall:
    """One call being run here: its context, and where its answer stands."""

    def __init__(self, call: dict, run: Callable, cancelled):
        self.call, self.run = call, run
        self.ctx = ToolContext(call, cancelled)
        self.posting = False  # its answer is being sent
        self.done = False


class ToolCalls:
    """The game's tool calls of one send, without the I/O: each
    `tool.requested` with a function here is run once (by its callId,
    however often it is heard); one without is left alone. `make_event`
    makes a call's `cancelled` event (threading's or asyncio's)."""

    def __init__(self, handlers: dict[str, Callable], make_event: Callable):
        self.handlers, self.make_event = handlers, make_event
        self.seen: set[str] = set()
        self.running: dict[str, ToolCall] = {}

    def requested(self, call: dict) -> ToolCall | None:
        """A call the turn waits on (`turnId`, `callId`, `name`,
        `arguments`, `deadline`): the one to run now, or None."""
        if call["callId"] in self.seen:
            return None  # heard already (a 202's pendingToolCalls, then its event)
        self.seen.add(call["callId"])
        run = self.handlers.get(call["name"])
        if run is None:
            return None  # not this client's to answer
        made = self.running[call["callId"]] = ToolCall(call, run, self.make_event())
        return made

    def answered(self, event: dict) -> ToolCall | None:
        """`tool.answered`: the call running here to cancel, when it was
        answered without it."""
        made = self.running.get(event.get("callId"))
        if made is None or made.posting or made.done or made.ctx.cancelled.is_set():
            return None
        how = {"deadline": "its deadline passed", "turn_ended": "its turn ended"}.get(
            event.get("by"), "other game code answered it"
        )
        made.ctx.cancel_reason = f"The call was not waited for any more: {how}."
        return made

    def ended(self) -> list[ToolCall]:
        """The turn has ended: the calls still running, to cancel."""
        left = [m for m in self.running.values() if not m.done and not m.ctx.cancelled.is_set()]
        for made in left:
            made.ctx.cancel_reason = "The turn ended before this call was answered."
        return left


def if_match_header(name: str, if_match) -> dict:
    """The If-Match header for `if_match`: a revision (3 → `"3"`), its ETag
    as the studio sent it, or `*`; none for None. Anything else is refused."""
    if if_match is None:
        return {}
    if isinstance(if_match, int) and not isinstance(if_match, bool) and if_match >= 1:
        return {"If-Match": f'"{if_match}"'}
    if isinstance(if_match, str) and if_match.strip():
        quoted = if_match == "*" or if_match.startswith(('"', "W/"))
        return {"If-Match": if_match if quoted else f'"{if_match}"'}
    raise TypeError(
        f"Agent({name!r}, options, if_match=…): if_match is a revision (agent.revision, a whole number) "
        f"or its ETag (agent.etag); got {if_match!r}"
    )


def revision_of(answer: dict | None) -> int | None:
    """The revision of the agent's config a definition's answer names."""
    return ((answer or {}).get("revision") or {}).get("number")


def same_definition(body: dict) -> str:
    """A definition's body as text that two equal definitions share."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def agent_path(name: str, rest: str = "") -> str:
    return f"/agents/{quote(name, safe='')}{rest}"


def query(**params) -> dict:
    """A query string's parameters, those not given left out."""
    return {name: value for name, value in params.items() if value is not None}


def turn_id_of(turn) -> str:
    """A turn's id from a turn (as a send returns it) or an id."""
    return str(turn["id"] if isinstance(turn, dict) else turn)


# --- replays -------------------------------------------------------------------------------


def replay_id_of(replay) -> str:
    """A replay's id from a replay or an id."""
    return str(replay["id"] if isinstance(replay, dict) else replay)


# A replay's statuses once it has ended.
REPLAY_ENDED = frozenset({"completed", "failed", "cancelled"})


def replay_body(from_block: int, definition: dict | None, through: int | None) -> dict:
    """The body of `POST /agents/{name}/replays`, what is not given left out."""
    return query(fromBlock=from_block, definition=definition, through=through)


# A replay whose end was read before its `replay.finished` came: how long
# to wait for the events of its last blocks, which may be on their way.
REPLAY_LATE_EVENTS_SECONDS = 1.0


class ReplayFollowed:
    """A replay being followed to its end: what the agent's events tell of
    it, and when to ask the studio how it stands (`replay`, as last read)."""

    def __init__(self, replay: dict):
        self.replay = replay
        self.quiet = 0  # waits in a row that heard nothing
        self.finished = False  # its `replay.finished` came
        self.late = False  # waited for its last events already

    @property
    def path(self) -> str:
        return agent_path(self.replay["agent"], f"/replays/{self.replay['id']}")

    def heard(self, events: list[dict]) -> tuple[list[dict], bool]:
        """Of the agent's events, the replay's blocks played
        (`replay.progress`), and whether to ask the studio how it stands: it
        ended, or the stream missed events (`resync`) or stopped (`error`)."""
        progress, ask = [], False
        for event in events:
            kind = event.get("type")
            if kind in ("replay.progress", "replay.finished") and event.get("replayId") != self.replay["id"]:
                continue  # another replay's
            if kind == "replay.progress":
                progress.append(event)
            elif kind in ("replay.finished", "resync", "error"):
                self.finished = self.finished or kind == "replay.finished"
                ask = True
        return progress, ask

    def wait(self) -> float | None:
        """Seconds to wait for the agent's next event; None: the replay has
        ended and every event of it came (or was waited for)."""
        if self.replay["status"] not in REPLAY_ENDED:
            return min(2.0**self.quiet, 15.0)  # then the studio is asked, in case the stream cannot tell
        if self.finished or self.late:
            return None
        self.late = True
        return REPLAY_LATE_EVENTS_SECONDS

    def nothing_came(self) -> bool:
        """The wait heard nothing; True: ask the studio."""
        if self.replay["status"] in REPLAY_ENDED:
            return False
        self.quiet += 1
        return True


# --- answers and retries -----------------------------------------------------------------


def error_of(response: httpx.Response) -> StudioError:
    """The StudioError a refusal (status 400 and up) stands for."""
    retry_after = _retry_after(response.headers.get("Retry-After"))
    try:
        error = response.json()["error"]
        return StudioError(
            response.status_code, error["code"], error["message"], error.get("details"), retry_after
        )
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:300] or response.reason_phrase
        return StudioError(
            response.status_code,
            "http_error",
            f"The studio answered {response.status_code}: {text}",
            None,
            retry_after,
        )


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the studio sends a number of them)."""
    try:
        return max(float(value), 0.0) if value else None
    except ValueError:
        return None


def checked(response: httpx.Response):
    """A studio's answer as JSON (None when it has no body); a refusal raised."""
    if response.status_code >= 400:
        raise error_of(response)
    return response.json() if response.content else None


class StreamCut(Exception):
    """An event stream that ended before its last event: the connection
    went, as a network error."""


# The last event of a turn's stream that could learn nothing more of it
# (the studio's Redis and database both away): follow the turn again.
STREAM_INTERRUPTED = "stream_interrupted"


class StreamInterrupted(StreamCut):
    """A turn's stream the studio ended with `stream_interrupted`: tried
    again as a cut one, at the turn's events URL (`EventStreamReader.follows`)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def turn_id_in(message: str) -> str | None:
    """The turn's id in a `stream_interrupted` message, which names
    `GET /api/v1/agents/{name}/turns/{id}/events`."""
    found = re.search(r"/turns/([^/\s]+)/events", message or "")
    return unquote(found[1]) if found else None


def retry_delay(error: BaseException, attempt: int, retries: int, *, repeatable: bool = True) -> float | None:
    """Seconds to wait before trying again after `error` on try number
    `attempt` (from 0); None: do not. A network error and a 429 or 503 are
    tried again, up to `retries` times, a refusal after its Retry-After; so
    is a 502 or 504 from a proxy in front of the studio. A request that is
    not `repeatable` (starting a replay) only when it certainly did not
    run: no connection was made, or the studio refused it (429, 503)."""
    if attempt >= retries:
        return None
    if isinstance(error, StudioError):
        if error.status not in ((429, 502, 503, 504) if repeatable else (429, 503)):
            return None
        if error.retry_after is not None:
            return error.retry_after
    elif not isinstance(error, (httpx.TransportError, StreamCut)):
        return None
    elif not (repeatable or never_sent(error)):
        return None
    return backoff(attempt)


def never_sent(error: BaseException) -> bool:
    """A network error that came before the request left: no connection."""
    return isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))


def unreachable(url: str, error: BaseException, *, repeatable: bool = True) -> StudioError:
    """The error of a request that found no studio, however often it tried;
    or of one that is not `repeatable`, whose connection failed on the way."""
    if isinstance(error, StreamInterrupted):
        return StudioError(
            None,
            "network_error",
            f"The studio at {url} could not follow the turn to its end, however often it was asked. "
            f"Its last word: {error.message}",
        )
    if repeatable or never_sent(error):
        return StudioError(None, "network_error", f"The studio at {url} could not be reached: {error!r}")
    return StudioError(
        None,
        "network_error",
        f"The connection to the studio at {url} failed before it answered ({error!r}): the request may "
        "or may not have been carried out.",
    )


def backoff(attempt: int, most: float = 5.0) -> float:
    """A growing pause with some jitter, so many clients do not come back at once."""
    return min(0.2 * 2**attempt, most) * random.uniform(0.75, 1.0)


# --- server-sent events --------------------------------------------------------------------


class EventStreamReader:
    """Reads one turn's server-sent events (a streamed send, or a turn
    followed), across every try of it: an event a try hears again (a retry
    follows the same turn, from the studio's buffer of its events) is
    passed over by its id, the seq. Feed it lines; `turn` is set once
    `turn.finished` came. A stream the studio ends with
    `stream_interrupted` raises StreamInterrupted, and from then on the
    tries `follow` the turn at its events URL (by `turn_id`: heard in its
    events, or named by the message)."""

    def __init__(self, on_event: Callable[[str, dict], object] | None = None):
        self.type, self.id, self.data = None, None, []
        self.last_seq: int | None = None
        self.turn: dict | None = None
        self.turn_id: str | None = None
        self.interrupted = False  # the studio said `stream_interrupted`
        self.on_event = on_event  # hears every event but the last, once
        self.text_heard = ""  # the reply's pieces handed on so far

    @property
    def follows(self) -> bool:
        """Whether a try follows `GET …/turns/{turn_id}/events` (else it
        asks again as it first did: the same key finds the same turn)."""
        return self.interrupted and self.turn_id is not None

    def line(self, line: str) -> str | None:
        """Takes one line of the stream; the text of a `reply.delta` it
        completes, not heard before (else None) — and at `turn.finished`,
        the rest of the reply no delta brought (a try that followed the
        turn after its words had left the studio's buffer), so the pieces
        handed on add up to the whole reply, each once."""
        if line:
            if not line.startswith(":"):
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    self.type = value
                elif field == "data":
                    self.data.append(value)
                elif field == "id":
                    self.id = value
            return None
        kind, seq, data = self.type, self.id, "\n".join(self.data)
        self.type, self.id, self.data = None, None, []
        if not data:
            return None
        if seq is not None and seq.isdigit():
            if self.last_seq is not None and int(seq) <= self.last_seq:
                return None  # heard on an earlier try
            self.last_seq = int(seq)
        event = json.loads(data)
        if kind == "error" and event.get("code") == STREAM_INTERRUPTED:
            self.interrupted = True
            self.turn_id = self.turn_id or turn_id_in(event.get("message", ""))
            raise StreamInterrupted(event.get("message", "The studio could not follow the turn."))
        if kind != "error" and event.get("turnId"):
            self.turn_id = event["turnId"]
        if self.on_event is not None and kind not in ("turn.finished", "error"):
            self.on_event(kind, event)
        if kind == "turn.finished":
            self.turn = event["turn"]
            reply = self.turn.get("reply") or ""
            if len(reply) > len(self.text_heard) and reply.startswith(self.text_heard):
                rest, self.text_heard = reply[len(self.text_heard) :], reply
                return rest
        elif kind == "error":
            raise StudioError(
                None, event.get("code", "error"), event.get("message", "The event stream ended.")
            )
        elif kind == "reply.delta":
            self.text_heard += event["text"]
            return event["text"]
        return None


# --- live events ---------------------------------------------------------------------------


def events_url(base_url: str, name: str, since: int | None) -> str:
    url = base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    url += f"/ws/v1{agent_path(name)}/events"
    return url if since is None else f"{url}?since={since}"


def subprotocols(key: str) -> list[str]:
    """The key travels as a subprotocol, never in the URL."""
    return ["studio.v1", f"bearer.{key}"]


class Handlers:
    """An agent's event handlers, by type (`"*"`: every event), and the seq
    of the last event handed on — where a new connection resumes, so no
    event is lost or handed on twice."""

    def __init__(self):
        self.by_type: dict[str, list[Callable]] = {}
        self.since: int | None = None
        self.error: dict | None = None  # the studio's last word before it closed

    def add(self, kind: str, handler: Callable) -> None:
        self.by_type.setdefault(kind, []).append(handler)

    def remove(self, kind: str, handler: Callable) -> bool:
        """Takes `handler` off; True when no handler is left."""
        handlers = self.by_type.get(kind, [])
        if handler in handlers:
            handlers.remove(handler)
        if not handlers:
            self.by_type.pop(kind, None)
        return not self.by_type

    def heard(self, text: str | bytes) -> tuple[dict, list[Callable]]:
        """One message off the socket: the event and the handlers it goes
        to (none for one handed on already, and for the studio's greeting)."""
        event = json.loads(text)
        kind, seq = event.get("type"), event.get("seq")
        if kind == "hello":
            # The seq this listener starts after: a drop before any event
            # resumes from there (a studio that does not say: from now).
            if self.since is None and isinstance(seq, int):
                self.since = seq
            return event, []
        if kind == "error":
            self.error = event
            return event, []  # handed on when the socket closes (`closed`)
        if isinstance(seq, int):
            if kind != "resync" and self.since is not None and seq <= self.since:
                return event, []
            self.since = seq
        return event, self.of(kind)

    def of(self, kind: str) -> list[Callable]:
        return [*self.by_type.get(kind, []), *self.by_type.get("*", [])]

    def closed(self, code: int | None, attempt: int) -> tuple[float | None, dict | None]:
        """The socket closed with `code` (None: it never opened, or broke):
        how long to wait before listening again, or None and the `error`
        event for the handlers when listening again cannot help."""
        if code in CLOSE_FOR_GOOD:
            error_code, message = CLOSE_FOR_GOOD[code]
            error = self.error or {"type": "error", "code": error_code, "message": message}
            return None, {**error, "closeCode": code}
        self.error = None
        if code == CLOSE_TOO_MANY_STREAMS:  # the game has all its streams open: a growing pause
            return backoff(attempt + 3, most=60.0), None
        return backoff(attempt), None


def as_error(event: dict) -> StudioError:
    return StudioError(None, event.get("code", "error"), event.get("message", "The event stream closed."))
