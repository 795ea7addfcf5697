"""`anthropic:<model>`: Anthropic's Messages API, through the official SDK.

A model step is one streamed call: its text goes to the request's `on_text`
as it comes, and the message its events add up to (`_Message`, put together
here rather than by the SDK's message stream, which decodes a tool's input
again at every piece and gives up on one nested a few hundred deep) is read
as a whole, tool calls and usage included. A tool's input is read once, at
the end, with the bounds of every model output (`base.arguments_read`).

The system prompt goes in `system`; the checkpoint's context block is the
first content block of the first user message, marked `cache_control:
ephemeral`, so the prefix that stays the same between compactions (tools,
system, block) is read from Anthropic's prompt cache; then the neutral
messages of `agents.sending.context`, converted to the Messages API's shape:

- user and assistant text -> text blocks (empty text is left out: the API
  refuses empty text blocks);
- an assistant message's `toolCalls` -> `tool_use` blocks (`input` must be
  an object: arguments the model sent that were not one are sent back as
  `{"_raw": <what it sent>}`);
- tool messages -> `tool_result` blocks in a user message.

The API wants roles to alternate, starting with a user message, so
consecutive messages of one role are merged into one message with several
content blocks (the context block and the player's first message; the
results of one step's tool calls). Tool-call ids are made unique within a
request (a history written by the `scripted` model reuses `call_1`).

A send that offers no tools (a transient send, or memory off) sends no
`tools`; the API refuses `tool_use` / `tool_result` blocks without tools, so
earlier tool calls in the history are shown to the model as plain text.

Usage: Anthropic reports uncached input, cache reads and cache writes
separately; the ledger gets their sum as input tokens, with the cache reads
as cached input tokens (priced at the cached rate).

One client per process for each set of settings (`ANTHROPIC_API_KEY`,
`ANTHROPIC_BASE_URL`, `STUDIO["MODEL_TIMEOUT_SECONDS"]`), read from
`django.conf.settings` at each call and kept by `ClientCache`, built with
`max_retries=0`: the studio retries 408/409/429/5xx (529, overloaded, among
them), timeouts and dropped connections itself (`base.Tries`,
`STUDIO["MODEL_MAX_RETRIES"]` times), so each attempt Anthropic could bill
is reported (`failed_attempts`). A model step runs under `call_cancellable`,
so a cancelled turn stops waiting at once (and stops reading the stream,
and retrying). Every failure becomes a `ProviderError` whose message says
what a designer can do about it; an answer the studio cannot read is one
Anthropic took, and bills.

The compactor is one streamed call with a forced tool call,
`write_checkpoint`, whose input schema is the compactor's answer shape (a
cancel ends a turn, never a compaction, so this call is not run under
`call_cancellable`).
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx2
from django.conf import settings

from studio.tokens import count_tokens

from .base import (
    BROKE_OFF,
    TIMED_OUT,
    UNCONFIGURED,
    UNREACHABLE,
    UNREADABLE,
    ClientCache,
    CompactionReply,
    ConversationRuns,
    ModelReply,
    ProviderError,
    ToolCall,
    Usage,
    arguments_read,
    call_cancellable,
    request_sent,
    status_public,
)
from .base import STATUS_NAMES as HTTP_STATUS_NAMES
from .causes import CONTEXT_TOO_LONG, OUTPUT_LIMIT, OUTPUT_REFUSED, status_cause
from .causes import words as said_words
from .prompts import (
    COMPACTION_SCHEMA,
    COMPACTOR_INSTRUCTIONS,
    compaction_input_tokens,
    compaction_output_tokens,
    compaction_parse,
    compaction_prompt,
    messages_tools,
)
from .retries import RETRY_COUNT_HEADER, Tries, sdk_retry

if TYPE_CHECKING:
    import anthropic

    from .base import CompactionRequest, Control, ModelRequest


def _sdk():
    """The Anthropic SDK, imported at its first use: it takes seconds of
    CPU to import, which a process that never calls Anthropic — every test
    process that only reads this module — need not spend."""
    import anthropic

    return anthropic


# Sent as the key when a compatible server at ANTHROPIC_BASE_URL needs none.
PLACEHOLDER_API_KEY = "no-key-needed"
_clients = ClientCache()

# The key under which tool arguments that were not an object are sent back.
RAW_ARGUMENTS_KEY = "_raw"

CHECKPOINT_TOOL = "write_checkpoint"
CHECKPOINT_TOOL_DESCRIPTION = (
    "Write the character's new checkpoint: the summary that replaces the previous one, and the "
    "whole new content of each open memory the removed conversation changes."
)
COMPACTOR_SYSTEM = (
    COMPACTOR_INSTRUCTIONS
    + "\nGive that answer by calling the write_checkpoint tool with it as the tool's input, "
    "not as text.\n"
)

TOOL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
STATUS_NAMES = {
    **HTTP_STATUS_NAMES,
    401: "authentication failed",
    403: "permission denied",
    529: "overloaded",
}
STATUS_ADVICE = {
    401: "Check ANTHROPIC_API_KEY.",
    402: "Check the Anthropic account's billing.",
    403: "Check that ANTHROPIC_API_KEY may use this model.",
    413: "The context is too large for the API; lower the agent's maxTokens.",
    429: "Try again shortly, or raise the account's rate limits.",
    529: "Anthropic is overloaded; try again shortly.",
}


@dataclass(frozen=True)
class _Conf:
    api_key: str
    base_url: str | None
    timeout: float
    max_retries: int
    max_output_tokens: int


def _conf() -> _Conf:
    """The client's settings, read in the calling thread (tests override them)."""
    base_url = settings.ANTHROPIC_BASE_URL or None
    api_key = settings.ANTHROPIC_API_KEY or (PLACEHOLDER_API_KEY if base_url else None)
    if api_key is None:
        raise ProviderError(
            "ANTHROPIC_API_KEY is not set: set it in the studio's environment to use an "
            "'anthropic:' model (or ANTHROPIC_BASE_URL for a compatible server).",
            public=UNCONFIGURED,
        )
    studio = settings.STUDIO
    return _Conf(
        api_key=api_key,
        base_url=base_url,
        timeout=float(studio["MODEL_TIMEOUT_SECONDS"]),
        max_retries=int(studio["MODEL_MAX_RETRIES"]),
        max_output_tokens=int(studio["MODEL_MAX_OUTPUT_TOKENS"]),
    )


class AnthropicProvider:
    def __init__(self, model: str):
        self.model = model

    # --- a model step ---------------------------------------------------------------

    def complete(self, request: ModelRequest, control: Control) -> ModelReply:
        conf = _conf()
        limit = request.max_output_tokens or conf.max_output_tokens
        # The messages go after these two and before the rest (`_stream`).
        params = {"model": self.model, "max_tokens": limit}
        if request.system.strip():
            params["system"] = request.system
        if request.tools:
            params["tools"] = messages_tools(request.tools, request.game_tools)
        tries = Tries(
            billed=Usage(input_tokens=request.input_tokens),
            retries=conf.max_retries,
            within=request.retry_within,
        )
        try:
            message = call_cancellable(
                lambda emit: self._stream(conf, params, emit, tries, request),
                control,
                request.on_text,
                usage_of=lambda whole: _usage(whole.usage),
                read_limit=conf.timeout,
                tries=tries,
            )
            with _unreadable(message):
                reply = self._reply(message, limit)
        except ProviderError as error:
            error.failed_attempts = list(tries.failed)
            raise
        reply.failed_attempts = list(tries.failed)
        return reply

    def _reply(self, message: _Message, limit: int) -> ModelReply:
        text = _text_of(message.content)
        calls = [
            ToolCall(id=block.id, name=block.name, arguments=_tool_input(block))
            for block in message.content
            if block.type == "tool_use"
        ]
        stop, usage = message.stop_reason, _usage(message.usage)
        if stop == "max_tokens" and calls and message.content[-1].type == "tool_use":
            raise ProviderError(
                f"Anthropic stopped at the output limit ({limit} tokens) in the middle "
                f"of a {calls[-1].name} call; raise STUDIO_MODEL_MAX_OUTPUT_TOKENS.",
                usage=usage,
                public=f"the model stopped at its output limit in the middle of a {calls[-1].name} call",
                cause=OUTPUT_LIMIT,
            )
        if text is None and not calls and stop in STOP_CAUSES:
            said = _empty_stop_message(stop, limit)
            raise ProviderError(
                said, usage=usage, public=said.split(";")[0].rstrip("."), cause=STOP_CAUSES[stop]
            )
        return ModelReply(text=text, tool_calls=calls, usage=usage)

    # --- the compactor ------------------------------------------------------------------

    def summarize(self, request: CompactionRequest) -> CompactionReply:
        conf = _conf()
        sent = compaction_input_tokens(request, COMPACTOR_SYSTEM)
        tries = Tries(billed=Usage(input_tokens=sent), retries=conf.max_retries, within=request.retry_within)
        try:
            reply = self._summarize(conf, request, tries)
        except ProviderError as error:
            error.failed_attempts = list(tries.failed)
            raise
        reply.failed_attempts = list(tries.failed)
        return reply

    def _summarize(self, conf: _Conf, request: CompactionRequest, tries: Tries) -> CompactionReply:
        max_tokens = compaction_output_tokens(request)
        params = {
            "model": self.model,
            "max_tokens": max_tokens,
            "system": COMPACTOR_SYSTEM,
            "messages": [{"role": "user", "content": [{"type": "text", "text": compaction_prompt(request)}]}],
            "tools": [
                {
                    "name": CHECKPOINT_TOOL,
                    "description": CHECKPOINT_TOOL_DESCRIPTION,
                    "input_schema": COMPACTION_SCHEMA,
                }
            ],
            "tool_choice": {"type": "tool", "name": CHECKPOINT_TOOL},
        }
        message = self._stream(conf, params, None, tries)
        with _unreadable(message):
            return self._checkpoint_read(message, request, max_tokens)

    @staticmethod
    def _checkpoint_read(message: _Message, request: CompactionRequest, max_tokens: int) -> CompactionReply:
        usage = _usage(message.usage)
        call = next(
            (
                block
                for block in message.content
                if block.type == "tool_use" and block.name == CHECKPOINT_TOOL
            ),
            None,
        )
        if message.stop_reason == "max_tokens":
            raise ProviderError(
                f"the compactor's answer was cut off at its output limit ({max_tokens} tokens): the "
                "open memories may be too long to rewrite in one answer; close or shorten some.",
                usage=usage,
                public="the compactor's answer was cut off at its output limit",
            )
        if call is None:
            said = _text_of(message.content)
            detail = f": it said {_clip(said)!r}" if said else ""
            said = f"the compactor answered without calling {CHECKPOINT_TOOL}{detail}"
            raise ProviderError(said, usage=usage, public=said)
        return compaction_parse(call.input_json or call.input, request, usage)

    # --- the call --------------------------------------------------------------------

    def _stream(
        self, conf: _Conf, params: dict, emit, tries: Tries, request: ModelRequest | None = None
    ) -> _Message:
        """One streamed message, read to its end, its text handed to `emit`
        (when there is one) as it comes; returns the whole message. `params`
        are the call's, with its `messages` or, for a model step, without
        them: then they are `request`'s. The request is tried again as
        `tries` says; a stream that has begun is not. A failure once
        message_start came is billed what it reported."""
        from .http1 import Answer, sdk_route

        message = _Message()
        try:
            with self._errors(conf):
                client = self._client(conf)
                route = sdk_route(client, "/v1/messages", _sdk())
                if route is None:  # the SDK's own stack: a model step's messages as a list
                    body = b""
                    if request is not None:
                        head, tail = _split(params)
                        params = {
                            **head,
                            "messages": request_messages(request, tools_offered=bool(request.tools)),
                            **tail,
                        }
                elif request is not None:
                    body = request_body(request, params)
                else:
                    body = _json({**params, "stream": True})

                def attempt(taken: int):
                    answer = route.post(body, taken) if route is not None else None
                    if answer is not None:
                        return taken, answer
                    return taken, client.messages.create(
                        **params, stream=True, extra_headers={RETRY_COUNT_HEADER: str(taken)}
                    )

                taken, stream = tries.run(attempt, _retry_of)
                if isinstance(stream, Answer):
                    try:
                        for event in _events(route, stream, taken):
                            message.add(event, emit)
                    finally:
                        stream.close()
                else:
                    with stream:
                        for event in stream:  # the SDK's types; data that is not an object comes as it is
                            message.add(event.to_dict() if hasattr(event, "to_dict") else event, emit)
        except ProviderError as error:
            if error.reached and error.usage is None and message.usage is not None:
                error.usage = message.billed_so_far()
            raise
        if message.usage is None:
            raise ProviderError(
                "Anthropic's stream ended before the message began (no message_start).",
                reached=True,
                public=BROKE_OFF,
            )
        if message.stop_reason is None:
            raise ProviderError(
                "Anthropic's stream ended before the message did (no stop reason): the connection may have dropped.",
                usage=message.billed_so_far(),
                public=BROKE_OFF,
            )
        return message

    @staticmethod
    def _client(conf: _Conf):
        # No retries in the SDK: the studio makes them (`Tries`), to see each attempt.
        return _clients.get(
            (conf.api_key, conf.base_url, conf.timeout),
            lambda: _sdk().Anthropic(
                api_key=conf.api_key, base_url=conf.base_url, timeout=conf.timeout, max_retries=0
            ),
        )

    @contextmanager
    def _errors(self, conf: _Conf):
        """SDK failures — and a stream's, which come as the HTTP client's
        own once it has started — as `ProviderError`s."""
        anthropic = _sdk()
        try:
            yield
        except anthropic.APIStatusError as error:
            said = error.api_message or _body_text(error.body)
            raise ProviderError(
                _status_message(error, self.model),
                public=status_public(error.status_code, STATUS_NAMES),
                cause=status_cause(error.status_code, f"{error.type or ''} {said}"),
                said=said_words(said),
            ) from error
        except (anthropic.APITimeoutError, httpx2.TimeoutException) as error:
            raise ProviderError(
                f"Anthropic timed out after {conf.timeout:g} s{_tries_note(error)}; try again, "
                "or raise STUDIO_MODEL_TIMEOUT_SECONDS.",
                reached=request_sent(error),
                public=TIMED_OUT,
            ) from error
        except (anthropic.APIConnectionError, httpx2.TransportError) as error:
            where = conf.base_url or "api.anthropic.com"
            raise ProviderError(
                f"could not reach Anthropic at {where}{_tries_note(error)}: {_said(error)} "
                "Check the network and ANTHROPIC_BASE_URL.",
                reached=request_sent(error),
                public=UNREACHABLE,
            ) from error
        except anthropic.AnthropicError as error:
            raise ProviderError(f"the Anthropic SDK failed: {_clip(str(error))}", reached=True) from error
        except ProviderError:
            raise
        except Exception as error:
            # What came back could not be read (an event nested past what a
            # decoder recurses, a shape the SDK refuses): Anthropic took the
            # request, and bills it.
            raise ProviderError(
                f"Anthropic's answer could not be read ({type(error).__name__}: {_clip(str(error))}).",
                reached=True,
                public=UNREADABLE,
            ) from error


def _retry_of(error: BaseException):
    anthropic = _sdk()
    return sdk_retry(
        error, status_error=anthropic.APIStatusError, connection_error=anthropic.APIConnectionError
    )


@contextmanager
def _unreadable(message: _Message):
    """Anything that fails while reading a whole message as a
    `ProviderError` billed what Anthropic reported of it."""
    try:
        yield
    except ProviderError:
        raise
    except Exception as error:
        raise ProviderError(
            f"Anthropic's answer could not be read ({type(error).__name__}: {_clip(str(error))}).",
            usage=_usage(message.usage),
            public=UNREADABLE,
        ) from error


# --- requests --------------------------------------------------------------------------


def request_messages(request: ModelRequest, *, tools_offered: bool) -> list[dict]:
    """The Messages API's `messages` for `request`: roles alternating,
    starting with a user message."""
    turns: list[dict] = []

    def add(role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    if request.context_block:
        add("user", [_context_block(request.context_block)])
    for role, blocks in _message_blocks(request.messages, _ToolIds(), tools_offered):
        add(role, blocks)
    if not turns or turns[0]["role"] != "user":
        # The API starts with the user; a history never should not, but
        # a message saying so beats a refused request.
        turns.insert(0, _scene_continues())
    return turns


def _scene_continues() -> dict:
    return {"role": "user", "content": [{"type": "text", "text": "(The scene continues.)"}]}


def _context_block(text: str) -> dict:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


def _message_blocks(messages, ids: _ToolIds, tools_offered: bool):
    """Each message's role in the Messages API and its content blocks, in
    order (`ids` carried from one message to the next)."""
    for message in messages:
        role = message["role"]
        if role == "tool":
            yield "user", _tool_result_blocks(message, ids, tools_offered)
        elif role == "assistant":
            blocks = _text_blocks(message.get("content"))
            for call in message.get("toolCalls") or ():
                blocks.extend(_tool_use_blocks(call, ids, tools_offered))
            yield "assistant", blocks
        else:
            yield "user", _text_blocks(message.get("content"))


def _split(params: dict) -> tuple[dict, dict]:
    """A model step's params around where its messages go: the model and
    max_tokens before them, the rest after."""
    head = {"model": params["model"], "max_tokens": params["max_tokens"]}
    return head, {key: value for key, value in params.items() if key not in head}


def request_body(request: ModelRequest, params: dict) -> bytes:
    """A streamed model step's JSON, byte for byte what
    `_json({**params, "messages": request_messages(request), "stream": True})`
    gives (the messages after max_tokens) — its history encoded only where
    it is new since this process's last call for it (`_turns`)."""
    head, tail = _split(params)
    # Speed: converting and encoding the whole history on every call; guarded by bench/anthropic_body.py (CPU per body).
    messages = _turns.messages_json(request, tools_offered=bool(request.tools))
    return _json(head)[:-1] + b',"messages":[' + messages + b"]," + _json({**tail, "stream": True})[1:]


def _block_json(block: dict) -> bytes:
    return json.dumps(block, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _turn_json(role: str, blocks: list[bytes]) -> bytes:
    return b'{"role":"' + role.encode() + b'","content":[' + b",".join(blocks) + b"]}"


class _TurnsRun:
    """One conversation's history as the Messages API's turns, encoded: the
    messages it holds, the tool ids as they stand after them, the first turn
    (the context block may join it) and the last (the next message may
    join it) as their blocks' JSON, every turn between them whole."""

    def __init__(self, tools_offered: bool):
        self.messages: list = []  # the first one held here cannot have its id reused while the run is kept
        self.tools_offered = tools_offered
        self.ids = _ToolIds()
        self.first: tuple[str, list[bytes]] | None = None
        self.between: list[bytes] = []
        self.last: tuple[str, list[bytes]] | None = None
        self.bytes = 0

    def extend(self, messages) -> None:
        for role, blocks in _message_blocks(messages, self.ids, self.tools_offered):
            if not blocks:
                continue
            encoded = [_block_json(block) for block in blocks]
            self.bytes += sum(map(len, encoded))
            joining = self.last or self.first
            if joining is not None and joining[0] == role:
                joining[1].extend(encoded)
            elif self.first is None:
                self.first = (role, encoded)
            else:
                if self.last is not None:
                    self.between.append(b"," + _turn_json(*self.last))
                self.last = (role, encoded)

    def json(self, context_block: str | None) -> bytes:
        """The `messages` array's inside, as request_messages' turns encode."""
        head: list[bytes] = []
        first = self.first
        if context_block:
            block = _block_json(_context_block(context_block))
            if first is not None and first[0] == "user":
                head.append(_turn_json("user", [block, *first[1]]))
                first = None
            else:
                head.append(_turn_json("user", [block]))
        elif first is None or first[0] != "user":
            head.append(_block_json(_scene_continues()))
        if first is not None:
            head.append(_turn_json(*first))
        last = [b"," + _turn_json(*self.last)] if self.last is not None else []
        return b"".join([b",".join(head), *self.between, *last])


class _EncodedTurns(ConversationRuns):
    """Each conversation's last request as `_TurnsRun`. A request whose
    messages start with all of its run's, with tools offered or not as they
    were, is encoded from there on, so a call costs what is new since the
    last one, however long the history. Anything else is encoded whole, and
    becomes its conversation's run."""

    def messages_json(self, request: ModelRequest, *, tools_offered: bool) -> bytes:
        messages = request.messages
        if not messages:
            return _TurnsRun(tools_offered).json(request.context_block)
        run, known = self.taken(messages, fits=lambda run: run.tools_offered == tools_offered)
        if run is None:
            run = _TurnsRun(tools_offered)
        run.extend(messages[known:])
        run.messages = list(messages)
        self.keep(run)
        return run.json(request.context_block)


_turns = _EncodedTurns()


def _text_blocks(text) -> list[dict]:
    if not isinstance(text, str) or not text.strip():
        return []
    return [{"type": "text", "text": text}]


class _ToolIds:
    """Tool-call ids as sent: valid for the API and unique in the request;
    a tool result refers to the newest call with its recorded id."""

    def __init__(self):
        self.used: set[str] = set()
        self.sent: dict[str, str] = {}
        # Per prefix: the suffix to try next (every one below it is taken),
        # so a history of calls that all have one id (the model chooses
        # ids) costs what its length does, not its square.
        self.next: dict[str, int] = {}

    def for_call(self, recorded) -> str:
        wire = str(recorded or "")
        if not TOOL_ID.match(wire):
            wire = re.sub(r"[^A-Za-z0-9_-]", "_", wire)[:48] or "call"
        if wire in self.used:
            # Keyed by the prefix the candidates share: ids alike in their
            # first 56 characters draw from one row of suffixes.
            prefix = wire[:56]
            n = self.next.get(prefix, 2)
            while (wire := f"{prefix}_{n}") in self.used:
                n += 1
            self.next[prefix] = n + 1
        self.used.add(wire)
        self.sent[str(recorded)] = wire
        return wire

    def for_result(self, recorded) -> str | None:
        return self.sent.get(str(recorded))


def _tool_use_blocks(call: dict, ids: _ToolIds, tools_offered: bool) -> list[dict]:
    arguments = call.get("arguments")
    if not tools_offered:
        shown = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        return [{"type": "text", "text": f"[called {call['name']}({shown})]"}]
    # Keys sorted, as the database may give them back in another order: the
    # same history must be the same bytes on every call (the prompt cache).
    tool_input = _sorted(arguments) if isinstance(arguments, dict) else {RAW_ARGUMENTS_KEY: arguments}
    return [
        {"type": "tool_use", "id": ids.for_call(call.get("id")), "name": call["name"], "input": tool_input}
    ]


def _sorted(value):
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def _tool_result_blocks(message: dict, ids: _ToolIds, tools_offered: bool) -> list[dict]:
    content = message.get("content") or "(no result)"
    tool_use_id = ids.for_result(message.get("toolCallId")) if tools_offered else None
    if tool_use_id is None:  # no tools offered, or a result with no call before it
        marker = " (error)" if message.get("isError") else ""
        return [{"type": "text", "text": f"[{message.get('name', 'tool')} result{marker}] {content}"}]
    return [
        {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": content,
            "is_error": bool(message.get("isError")),
        }
    ]


# --- replies ---------------------------------------------------------------------------


@dataclass
class _Block:
    """One content block of a streamed message: a text block's text (what
    content_block_start gave, then each text_delta's); a tool_use block's
    id, name, and input — as content_block_start gave it, and the JSON its
    input_json_delta pieces add up to (`input_json`). Pieces are joined
    when read, once: the model chooses how many there are, and a string
    grown piece by piece on an attribute is copied whole at each one."""

    type: str
    texts: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""
    input: Any = None
    pieces: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @property
    def input_json(self) -> str:
        return "".join(self.pieces)


@dataclass
class _Tally:
    """A message's usage as its events report it (message_start, then each
    message_delta's totals)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


def _json(params: dict) -> bytes:
    """The request's body as the SDK encodes it: UTF-8, compact."""
    return json.dumps(params, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _events(route, answer, taken: int):
    """The events of a stream on the studio's own connection, as dicts, read
    as the SDK reads them: pings and unnamed events skipped, an `error`
    event raised as the SDK's own error."""
    from .http1 import sse_events

    for name, data in sse_events(answer.iter_bytes()):
        if name in (None, "ping"):
            continue
        if name == "error":
            try:
                body = json.loads(data)
                said = f"{body}"
            except (TypeError, ValueError):  # no data, or not JSON
                body, said = data or "", data or f"Error code: {answer.status_code}"
            raise route.client._make_status_error(said, body=body, response=route.response(answer, taken))
        if data:
            yield json.loads(data)


class _Message:
    """A message put together from the events of its stream (each a dict,
    as the Messages API sends it)."""

    def __init__(self):
        self.content: list[_Block] = []
        self.stop_reason: str | None = None
        self.usage: _Tally | None = None

    def add(self, event, emit) -> None:
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start":
            self.usage = _Tally()
            self._count(_field(event.get("message"), "usage"))
        elif kind == "content_block_start":
            block = event.get("content_block")
            self.content.append(
                _Block(
                    type=_field(block, "type"),
                    texts=[text] if isinstance(text := _field(block, "text"), str) else [],
                    id=_field(block, "id") or "",
                    name=_field(block, "name") or "",
                    input=_field(block, "input"),
                )
            )
        elif kind == "content_block_delta" and 0 <= event.get("index", -1) < len(self.content):
            block, delta = self.content[event["index"]], event.get("delta")
            if _field(delta, "type") == "text_delta" and block.type == "text":
                if isinstance(piece := delta.get("text"), str):
                    block.texts.append(piece)
                    if emit is not None:
                        emit(piece)
            elif _field(delta, "type") == "input_json_delta":
                block.pieces.append(delta["partial_json"])
        elif kind == "message_delta":
            self.stop_reason = _field(event.get("delta"), "stop_reason")
            if self.usage is not None:
                self._count(event.get("usage"))

    def billed_so_far(self) -> Usage:
        """What a message that ended unfinished bills: the input its start
        reported, and at least the output that streamed (counted here when
        the count reported is behind it)."""
        usage = _usage(self.usage)
        streamed = sum(count_tokens(block.text) + count_tokens(block.input_json) for block in self.content)
        return Usage(
            input_tokens=usage.input_tokens,
            output_tokens=max(usage.output_tokens, streamed),
            cached_input_tokens=usage.cached_input_tokens,
        )

    def _count(self, usage) -> None:
        """Usage counts are totals so far: each one reported replaces the last."""
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ):
            value = _field(usage, name)
            if isinstance(value, int):
                setattr(self.usage, name, value)


def _field(value, name: str):
    """`value[name]` of an object in an event, None for anything else."""
    return value.get(name) if isinstance(value, dict) else None


def _tool_input(block: _Block):
    """A tool_use block's input, read with bounds: its JSON as streamed, or
    what content_block_start gave when no piece came. The Messages API's
    input is a value, not text: one that is valid JSON but not an object is
    handed on decoded."""
    if not block.pieces:
        return arguments_read(block.input)
    value = arguments_read(block.input_json)
    if type(value) is str:  # valid JSON within the bounds, not an object
        return json.loads(value)
    return value


def _text_of(content) -> str | None:
    """The reply's text: adjacent text blocks (split by citations) joined as
    they are, separate runs of text as paragraphs. None when there is none."""
    runs: list[list[str]] = []
    in_run = False
    for block in content:
        if block.type == "text":
            if in_run:
                runs[-1].extend(block.texts)
            else:
                runs.append(list(block.texts))
            in_run = True
        else:
            in_run = False
    text = "\n\n".join(run for run in map("".join, runs) if run.strip())
    return text or None


def _usage(usage) -> Usage:
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    return Usage(
        input_tokens=(usage.input_tokens or 0) + cache_read + cache_write,
        output_tokens=usage.output_tokens or 0,
        cached_input_tokens=cache_read,
    )


# The stop reasons that end a message with nothing said, by their class.
STOP_CAUSES = {
    "max_tokens": OUTPUT_LIMIT,
    "refusal": OUTPUT_REFUSED,
    "model_context_window_exceeded": CONTEXT_TOO_LONG,
}


def _empty_stop_message(stop: str, limit: int) -> str:
    if stop == "max_tokens":
        return (
            f"Anthropic stopped at the output limit ({limit} tokens) before saying "
            "anything; raise STUDIO_MODEL_MAX_OUTPUT_TOKENS."
        )
    if stop == "refusal":
        return "Anthropic declined to answer this message (stop reason 'refusal')."
    return "the context is larger than the model's context window; lower the agent's maxTokens."


# --- errors ----------------------------------------------------------------------------


def _retries_taken(error: anthropic.APIError) -> int:
    """How many times the SDK retried before giving up: it numbers each
    attempt in the `x-stainless-retry-count` header."""
    try:
        return int(error.request.headers.get("x-stainless-retry-count", "0"))
    except (
        AttributeError,
        RuntimeError,
        TypeError,
        ValueError,
    ):  # RuntimeError: the HTTP client's, with no request
        return 0


def _retries_note(error: anthropic.APIError) -> str:
    retries = _retries_taken(error)
    return f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""


def _tries_note(error: anthropic.APIError) -> str:
    retries = _retries_taken(error)
    return f" (tried {retries + 1} times)" if retries else ""


def _status_message(error: anthropic.APIStatusError, model: str) -> str:
    status = error.status_code
    name = STATUS_NAMES.get(status) or (error.type or "error").replace("_", " ")
    note = _retries_note(error)
    detail = error.api_message or _body_text(error.body) or "no details"
    advice = STATUS_ADVICE.get(status, "")
    if status == 404:
        advice = f"Check the agent's model ('anthropic:{model}')."
    sentence = f"Anthropic answered {status} ({name}){note}: {_clip(detail)}"
    return f"{sentence.rstrip('.')}. {advice}".strip()


def _body_text(body) -> str:
    if body is None:
        return ""
    return body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)


def _said(error: Exception) -> str:
    return getattr(error, "message", None) or f"{type(error).__name__}: {error}".rstrip(": ")


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
