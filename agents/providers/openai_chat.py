"""`openai:<model>`: any OpenAI-compatible chat-completions server —
OpenAI itself, or a local one (Ollama, vLLM, llama.cpp, LM Studio) at
`OPENAI_BASE_URL`.

One client per process for each set of settings (`OPENAI_API_KEY`,
`OPENAI_BASE_URL`, `STUDIO["MODEL_TIMEOUT_SECONDS"]`), built with
`max_retries=0`: the studio retries 408/409/429/5xx, timeouts and dropped
connections itself (`base.Tries`, `STUDIO["MODEL_MAX_RETRIES"]` times), so
each attempt the server could bill is reported (`failed_attempts`).
Whatever still fails is a `ProviderError` whose message says what happened
and what to check; an answer the studio cannot read is one the server
took, and bills (`reached`).

A model step sends: the system prompt, the context block (when a
checkpoint exists) as the first user message, then the conversation; the
memory tools as functions when any are offered (none on a transient send).
It streams (`stream_options.include_usage`, so the last chunk reports the
tokens), on the studio's own HTTP/1.1 connections (`http1.py`; through the
SDK's HTTP stack when a proxy is configured): text goes to the request's `on_text` as it comes, tool calls are
put together from their pieces and handed on whole. A server that answers
with a whole completion instead is read as one. Tool-call arguments are
read with bounds (`base.arguments_read`): a dict, or the raw text when the
model sent something that is not a JSON object, or `UnparsedArguments`
saying why they were not read — the engine answers both with an error
result. A compaction asks for the answer as strict JSON schema, and falls
back once to plain JSON mode for servers that refuse the schema.
"""

import functools
import json
import ssl
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings

from studio.tokens import count_tokens

from .base import (
    BROKE_OFF,
    STATUS_NAMES,
    TIMED_OUT,
    UNCONFIGURED,
    UNREACHABLE,
    UNREADABLE,
    ClientCache,
    CompactionReply,
    CompactionRequest,
    Control,
    ConversationRuns,
    ModelReply,
    ModelRequest,
    ProviderError,
    ToolCall,
    Usage,
    arguments_read,
    call_cancellable,
    request_sent,
    status_public,
)
from .causes import OUTPUT_REFUSED, status_cause
from .causes import words as said_words
from .prompts import (
    COMPACTION_SCHEMA,
    COMPACTOR_INSTRUCTIONS,
    chat_tools,
    compaction_input_tokens,
    compaction_output_tokens,
    compaction_parse,
    compaction_prompt,
)
from .retries import RETRY_COUNT_HEADER, Tries, sdk_retry

SERVER = "The OpenAI-compatible server"
_clients = ClientCache()
# Local servers (Ollama, vLLM, ...) take any key; the SDK insists on one.
PLACEHOLDER_KEY = "no-key-needed"
DETAIL_MAX_CHARS = 300

STATUS_MEANING = {
    **STATUS_NAMES,
    401: "unauthorized — check OPENAI_API_KEY",
    403: "forbidden — the key may not use this model",
    404: "not found — check the model name and OPENAI_BASE_URL",
}

SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "compaction", "schema": COMPACTION_SCHEMA, "strict": True},
}
JSON_FORMAT = {"type": "json_object"}
# What `chat.completions.create` asks of the client for every call: its API key as a bearer token.
REQUEST_OPTIONS = {"security": {"bearer_auth": True}}


class OpenAIProvider:
    def __init__(self, model: str):
        self.model = model

    # --- a model step -------------------------------------------------------------------

    def complete(self, request: ModelRequest, control: Control) -> ModelReply:
        params = {
            "model": self.model,
            "max_completion_tokens": request.output_limit(),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = chat_tools(request.tools, request.game_tools)
        body = chat_body(request, params)
        tries = Tries(billed=Usage(input_tokens=request.input_tokens), within=request.retry_within)
        sent = request.input_tokens
        try:
            reply = call_cancellable(
                lambda emit: self._stream(body, emit, tries),
                control,
                request.on_text,
                usage_of=lambda streamed: _usage(streamed.usage, sent, streamed.text, streamed.tool_calls),
                read_limit=settings.STUDIO["MODEL_TIMEOUT_SECONDS"],
                tries=tries,
            )
            with _unreadable():
                text, calls = reply.text, reply.tool_calls
                if text is None and not calls:
                    text = reply.refusal
                usage = _usage(reply.usage, sent, text, calls)
            if not text and not calls and reply.finish == "content_filter":
                raise ProviderError(
                    f"{SERVER} stopped the answer with its content filter (finish_reason 'content_filter').",
                    usage=usage,
                    public="the model provider's content filter stopped the answer",
                    cause=OUTPUT_REFUSED,
                )
        except ProviderError as error:
            error.failed_attempts = list(tries.failed)
            raise
        return ModelReply(text=text, tool_calls=calls, usage=usage, failed_attempts=list(tries.failed))

    # --- a compaction ------------------------------------------------------------------

    def summarize(self, request: CompactionRequest) -> CompactionReply:
        sent = compaction_input_tokens(request, COMPACTOR_INSTRUCTIONS)
        tries = Tries(billed=Usage(input_tokens=sent), within=request.retry_within)
        try:
            reply = self._summarize(request, sent, tries)
        except ProviderError as error:
            error.failed_attempts = list(tries.failed)
            raise
        reply.failed_attempts = list(tries.failed)
        return reply

    def _summarize(self, request: CompactionRequest, sent: int, tries: Tries) -> CompactionReply:
        params = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": COMPACTOR_INSTRUCTIONS},
                {"role": "user", "content": compaction_prompt(request)},
            ],
            "max_completion_tokens": compaction_output_tokens(request),
            "response_format": SCHEMA_FORMAT,
        }
        try:
            response = self._create(params, tries, raise_rejected=True)
        except _Rejected:
            # Many compatible servers know JSON mode but not a JSON schema.
            response = self._create({**params, "response_format": JSON_FORMAT}, tries)
        usage = _reported(getattr(response, "usage", None))
        with _unreadable(usage):
            choice = _first_choice(response, usage)
            content = choice.message.content
            usage = usage or _usage(None, sent, content, [])
            return self._compaction_read(choice, content, usage, request, params)

    @staticmethod
    def _compaction_read(choice, content, usage: Usage, request: CompactionRequest, params: dict):
        if getattr(choice, "finish_reason", None) == "length":
            raise ProviderError(
                f"the compactor's answer was cut off at {params['max_completion_tokens']} tokens "
                "(raise STUDIO_COMPACTION_MAX_OUTPUT_TOKENS)",
                usage=usage,
                public="the compactor's answer was cut off at its output limit",
            )
        if not content:
            raise ProviderError("the compactor's answer was empty", usage=usage, public=UNREADABLE)
        return compaction_parse(content, request, usage)

    # --- the call ----------------------------------------------------------------------

    def _client(self):
        import openai

        base_url = settings.OPENAI_BASE_URL or None
        api_key = settings.OPENAI_API_KEY or (PLACEHOLDER_KEY if base_url else None)
        if not api_key:
            raise ProviderError(
                "OPENAI_API_KEY is not set: set it, or set OPENAI_BASE_URL to a local "
                "OpenAI-compatible server, to use an 'openai:' model.",
                public=UNCONFIGURED,
            )
        timeout = settings.STUDIO["MODEL_TIMEOUT_SECONDS"]
        # No retries in the SDK: the studio makes them (`Tries`), to see each attempt.
        return _clients.get(
            (api_key, base_url, timeout),
            lambda: openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0),
        )

    def _create(self, params: dict, tries: Tries, *, raise_rejected: bool = False):
        """One chat completion, not streamed, tried again as `tries` says."""
        from openai.types.chat import ChatCompletion

        client = self._client()
        with _errors(client, raise_rejected=raise_rejected):
            # Speed: the SDK's walk of the request (create() bypassed, as in `_stream`); guarded by bench/agent_server.py (server CPU per message).
            # `chat.completions.create(**params)` would first walk the whole
            # request against the SDK's TypedDicts (`maybe_transform`) on
            # every call, a cost that grows with history. The body built
            # here is already in wire form, so it goes straight to the same
            # endpoint, with the same auth, retries, timeouts and errors.
            response = tries.run(
                lambda taken: client.post(
                    "/chat/completions",
                    cast_to=ChatCompletion,
                    options=_attempt_options(REQUEST_OPTIONS, taken),
                    body=params,
                ),
                _retry_of,
            )
            return _completion(response)

    def _stream(self, body: bytes, emit, tries: Tries) -> "_Streamed":
        """One streamed chat completion (JSON already encoded), read to its
        end, its text handed to `emit` as it comes. The request is tried
        again as `tries` says; an answer that has begun is not."""
        import openai

        from .http1 import sdk_route

        client = self._client()
        try:
            with _errors(client):
                route = sdk_route(client, "/chat/completions", openai)

                def attempt(taken: int):
                    answer = route.post(body, taken) if route is not None else None
                    return answer if answer is not None else _post_streamed(client, body, taken)

                response = tries.run(attempt, _retry_of)
                try:
                    if "text/event-stream" not in response.headers.get("content-type", ""):
                        return _Streamed.whole(response.read())
                    return _Streamed.read(_sse_data(response.iter_bytes()), emit)
                finally:
                    response.close()
        except ProviderError as error:
            # A stream that broke off with no usage reported is billed the
            # input sent and the output that came — its tool calls' pieces
            # too, which the turn never saw as text.
            streamed = getattr(error, _STREAMED, None) or getattr(error.__cause__, _STREAMED, None)
            if streamed and error.usage is None and error.reached:
                error.usage = Usage(
                    input_tokens=tries.billed.input_tokens, output_tokens=count_tokens(streamed)
                )
            raise


# Speed: create()'s walk of the request against the SDK's types, and the SDK's building of each request around its HTTP client; guarded by bench/agent_server.py (server CPU per message).
def _post_streamed(client, body: bytes, taken: int):
    """POST `body` (the request, JSON already encoded) to the chat endpoint
    through the SDK client's own HTTP client, with its headers and key, the
    answer left to stream; failures raised as the SDK's own errors, as its
    `post` would raise them. `taken`: the retries before this attempt."""
    import httpx2
    import openai

    http = client._client
    url, headers = _wire(client)
    request = http.build_request(
        "POST", url, content=body, headers={**headers, RETRY_COUNT_HEADER: str(taken)}
    )
    try:
        response = http.send(request, stream=True)
    except httpx2.TimeoutException as error:
        raise openai.APITimeoutError(request=request) from error
    except (httpx2.RequestError, ssl.SSLError) as error:
        raise openai.APIConnectionError(request=request) from error
    if response.status_code >= 400:
        try:
            response.read()
        finally:
            response.close()
        raise client._make_status_error_from_response(response)
    return response


@functools.lru_cache(maxsize=16)
def _wire(client) -> tuple[str, dict]:
    """The chat endpoint's address and the headers every request to it
    carries, as the SDK client would send them (read once per client)."""
    from .http1 import sdk_headers

    return f"{client.base_url}chat/completions", sdk_headers(client)


def _attempt_options(options: dict, taken: int) -> dict:
    """A request's options for its attempt after `taken` retries, numbered as the SDK numbers its own."""
    return {**options, "headers": {**options.get("headers", {}), RETRY_COUNT_HEADER: str(taken)}}


def _retry_of(error: BaseException):
    import openai

    return sdk_retry(error, status_error=openai.APIStatusError, connection_error=openai.APIConnectionError)


@contextmanager
def _errors(client, *, raise_rejected: bool = False):
    """SDK failures as `ProviderError`; with `raise_rejected`, a 400/422 is
    `_Rejected` instead."""
    import httpx2
    import openai

    try:
        yield
    except openai.APIStatusError as error:
        if raise_rejected and error.status_code in (400, 422):
            raise _Rejected() from error
        raise ProviderError(
            _status_text(error),
            public=status_public(error.status_code),
            cause=status_cause(error.status_code, _said_with_code(error)),
            said=said_words(_said(error)),
        ) from error
    except openai.APITimeoutError as error:
        raise ProviderError(
            f"{SERVER} timed out: no answer within {settings.STUDIO['MODEL_TIMEOUT_SECONDS']:g} s{_retries(error, ',')}. "
            "Check the server, or raise STUDIO_MODEL_TIMEOUT_SECONDS.",
            reached=request_sent(error),
            public=TIMED_OUT,
        ) from error
    except openai.APIConnectionError as error:
        cause = error.__cause__ or error
        raise ProviderError(
            f"Could not reach the OpenAI-compatible server at {client.base_url}{_retries(error, ',')} "
            f"({cause}). Check OPENAI_BASE_URL and that the server is running.",
            reached=request_sent(error),
            public=UNREACHABLE,
        ) from error
    except openai.OpenAIError as error:
        raise ProviderError(f"{SERVER} call failed: {error}", reached=True) from error
    except httpx2.HTTPError as error:  # reading a streamed answer, after the SDK handed it over
        raise ProviderError(
            f"{SERVER}'s answer broke off: {type(error).__name__}: {error}", reached=True, public=BROKE_OFF
        ) from error
    except ProviderError:
        raise
    except Exception as error:
        # The SDK, or the studio, could not read what came back (bad JSON,
        # JSON nested past what a decoder recurses, a shape it refuses): the
        # server took the request, and bills it.
        raise ProviderError(
            f"{SERVER}'s answer could not be read as a chat completion ({type(error).__name__}: "
            f"{_snippet(error)}).",
            reached=True,
            public=UNREADABLE,
        ) from error


@contextmanager
def _unreadable(usage: Usage | None = None):
    """Anything that fails while reading an answer the server gave (and
    bills: `usage`, when it reported one) as a `ProviderError` saying so."""
    try:
        yield
    except ProviderError:
        raise
    except Exception as error:
        raise ProviderError(
            f"{SERVER}'s answer could not be read ({type(error).__name__}: {_snippet(error)}).",
            usage=usage,
            reached=True,
            public=UNREADABLE,
        ) from error


def _completion(response):
    """`response` if it is a chat completion; the SDK hands back a body that
    is not JSON as it came (a proxy page, a wrong URL). Either way the
    server took the request: it may bill it."""
    if isinstance(response, str | bytes) or not hasattr(response, "choices"):
        raise ProviderError(
            f'{SERVER}\'s answer could not be read as a chat completion: "{_snippet(response)}"'
            " — check OPENAI_BASE_URL.",
            reached=True,
            public=UNREADABLE,
        )
    return response


class _Rejected(Exception):
    """The server refused the request as malformed (400/422)."""


# --- requests ------------------------------------------------------------------------------


def chat_messages(request: ModelRequest) -> list[dict]:
    """The system prompt, the context block as the first user message,
    then the neutral messages (agents.sending.context) in chat-completions form."""
    messages: list[dict] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    if request.context_block:
        messages.append({"role": "user", "content": request.context_block})
    for message in request.messages:
        messages.append(_chat_message(message))
    return messages


def chat_body(request: ModelRequest, params: dict) -> bytes:
    """The request's JSON: `params` with `chat_messages(request)` as its
    messages — the conversation encoded only where it is new since this
    process's last call for it (`_history`)."""
    parts = [json.dumps(m, ensure_ascii=False).encode() for m in chat_messages(_head_only(request))]
    if request.messages:
        # Speed: re-encoding the whole history on every call; guarded by bench/agent_server.py (server CPU per message).
        parts.append(_history.joined(request.messages))
    rest = json.dumps(params, ensure_ascii=False).encode()
    return b'{"messages":[' + b",".join(parts) + b"]," + rest[1:]


def _head_only(request: ModelRequest) -> ModelRequest:
    return ModelRequest(system=request.system, context_block=request.context_block, messages=[], tools=[])


def _message_json(message: dict) -> bytes:
    return json.dumps(_chat_message(message), ensure_ascii=False).encode()


@dataclass(frozen=True)
class _Run:
    messages: list  # the first one held here cannot have its id reused while the run is kept
    joined: bytes

    @property
    def bytes(self) -> int:
        return len(self.joined)


class _EncodedHistory(ConversationRuns):
    """Each conversation's last request — its messages, and their
    chat-completions JSON joined (`_Run`). A request whose messages start
    with all of its run's is encoded from there on, so a call costs what is
    new since the last one, however long the history and however many
    agents share the process. Anything else (a transient send in between, a
    process that has not seen the agent) is encoded whole."""

    def joined(self, messages: list[dict]) -> bytes:
        run, known = self.taken(messages)
        if run is not None:
            joined = run.joined + b"".join(b"," + _message_json(m) for m in messages[known:])
        else:
            joined = b",".join(_message_json(m) for m in messages)
        self.keep(_Run(list(messages), joined))
        return joined


_history = _EncodedHistory()


def _chat_message(message: dict) -> dict:
    role = message["role"]
    if role == "tool":
        content = message["content"]
        if message.get("isError"):
            content = f"Error: {content}"
        return {"role": "tool", "tool_call_id": message["toolCallId"], "content": content}
    if role == "assistant" and message.get("toolCalls"):
        out: dict = {"role": "assistant"}
        if message.get("content"):
            out["content"] = message["content"]
        out["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": _arguments_text(call["arguments"])},
            }
            for call in message["toolCalls"]
        ]
        return out
    return {"role": role, "content": message.get("content") or ""}


def _arguments_text(arguments) -> str:
    """What the model sent: its raw text when that was not valid JSON.
    Keys sorted: the same call reads back from the database with its keys
    in another order (jsonb keeps its own), and history must be the same
    bytes on every call for the provider's prompt cache."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


# --- replies -------------------------------------------------------------------------------


def _first_choice(response, usage: Usage | None = None):
    """The completion's first choice; a completion without one was still
    answered, and is billed (`usage`, when the server reported one)."""
    choices = getattr(response, "choices", None)
    if not choices:
        raise ProviderError(
            f"{SERVER} answered with no choices (an empty completion).",
            usage=usage,
            reached=True,
            public=UNREADABLE,
        )
    choice = choices[0]
    if getattr(choice, "message", None) is None:
        raise ProviderError(
            f"{SERVER} answered with a choice that has no message.",
            usage=usage,
            reached=True,
            public=UNREADABLE,
        )
    return choice


# The attribute a stream's failure carries what streamed of the answer in.
_STREAMED = "studio_streamed_output"


class _Streamed:
    """A model step's answer put together from its chunks: the text, the
    tool calls (their pieces joined by index), the usage of the last chunk."""

    def __init__(self):
        self.text: str | None = None
        self.refusal: str | None = None
        self.finish: str | None = None
        self.tool_calls: list[ToolCall] = []
        self.usage = None
        # The pieces as they stream, joined once (`_joined`): a string grown
        # by `+=` on an attribute is copied whole at every piece, and the
        # model chooses how many pieces an answer comes in.
        self._texts: list[str] = []
        self._refusals: list[str] = []

    @classmethod
    def read(cls, data, emit) -> "_Streamed":
        """The answer from the `data` of each event the server sent: read
        here as JSON (building the SDK's models of each chunk cost more
        than the rest of the call), and read to the end of the response,
        past `[DONE]`, so its connection is kept for the next call. A
        stream that cannot be read on, or ends unfinished, after the server
        reported its usage is billed that usage: the error carries it."""
        # Speed: an SDK model per streamed chunk (read as JSON); guarded by bench/agent_server.py (server CPU per message).
        answer, calls = cls(), {}
        try:
            return answer._read(data, calls, emit)
        except Exception as error:
            if calls:  # what streamed of the answer, for its bill (`_stream`)
                answer._joined()
                pieces = "".join(call["name"] + "".join(call["arguments"]) for call in calls.values())
                setattr(error, _STREAMED, (answer.text or "") + pieces)
            raise

    def _read(self, data, calls: dict, emit) -> "_Streamed":
        answer, finish = self, None
        for text in data:
            if text.startswith("[DONE]"):
                continue
            try:
                chunk = json.loads(text)
            except ValueError:
                raise ProviderError(
                    f"{SERVER} streamed something that is not JSON: {text[:200]!r}",
                    usage=_reported(answer.usage),
                    reached=True,
                    public=UNREADABLE,
                ) from None
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else None
                raise ProviderError(
                    f"{SERVER} reported an error mid-stream: {message or error}",
                    usage=_reported(answer.usage),
                    reached=True,
                    public=BROKE_OFF,
                    said=said_words(message),
                )
            answer.usage = chunk.get("usage") or answer.usage
            for choice in chunk.get("choices") or ():
                if isinstance(choice, dict) and choice.get("index") == 0:
                    finish = choice.get("finish_reason") or finish or ""
                    answer._add(choice.get("delta"), calls, emit)
        if finish is None:
            raise ProviderError(
                f"{SERVER} answered with no choices (an empty completion).",
                usage=_reported(answer.usage),
                reached=True,
                public=UNREADABLE,
            )
        if not finish:
            raise ProviderError(
                f"{SERVER}'s stream ended before the answer did (no finish reason): the connection may have dropped.",
                usage=_reported(answer.usage),
                reached=True,
                public=BROKE_OFF,
            )
        answer._joined()
        answer.tool_calls = [
            ToolCall(id=call["id"], name=call["name"], arguments=_arguments_value("".join(call["arguments"])))
            for _, call in sorted(calls.items())
        ]
        answer.finish = finish
        return answer

    def _joined(self) -> None:
        if self._texts:
            self.text = "".join(self._texts)
        if self._refusals:
            self.refusal = "".join(self._refusals)

    @classmethod
    def whole(cls, body: bytes) -> "_Streamed":
        """A whole completion, from a server that does not stream."""
        from openai.types.chat import ChatCompletion

        try:
            data = json.loads(body)
        except ValueError:
            data = body.decode("utf-8", "replace")
        completion = _completion(ChatCompletion.construct(**data) if isinstance(data, dict) else data)
        choice = _first_choice(completion, _reported(getattr(completion, "usage", None)))
        message = choice.message
        answer = cls()
        answer.text, answer.refusal = message.content, getattr(message, "refusal", None)
        answer.finish = getattr(choice, "finish_reason", None)
        answer.tool_calls = [_tool_call(call) for call in message.tool_calls or ()]
        answer.usage = getattr(completion, "usage", None)
        return answer

    def _add(self, delta, calls: dict, emit) -> None:
        if not isinstance(delta, dict):
            return
        content = delta.get("content")
        if isinstance(content, str):
            emit(content)
            self._texts.append(content)
        if isinstance(delta.get("refusal"), str):
            self._refusals.append(delta["refusal"])
        for piece in delta.get("tool_calls") or ():
            if not isinstance(piece, dict):
                continue
            call = calls.setdefault(piece.get("index"), {"id": "", "name": "", "arguments": []})
            call["id"] = piece.get("id") or call["id"]
            function = piece.get("function")
            if isinstance(function, dict):
                call["name"] = function.get("name") or call["name"]
                arguments = function.get("arguments")
                if arguments:  # sent as JSON itself by some servers: read as its text
                    text = (
                        arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
                    )
                    call["arguments"].append(text)


def _sse_data(chunks):
    """The data of each server-sent event in the byte `chunks`."""
    from .http1 import sse_events

    return (data for _, data in sse_events(chunks) if data is not None)


def _tool_call(call) -> ToolCall:
    function = getattr(call, "function", None)
    if function is not None:
        name, raw = function.name, function.arguments
    else:  # a custom (non-function) tool call: not one we offer; the engine says so
        custom = getattr(call, "custom", None)
        name, raw = getattr(custom, "name", "") or "", getattr(custom, "input", "") or ""
    return ToolCall(id=call.id or "", name=name or "", arguments=_arguments_value(raw))


def _arguments_value(raw):
    """The arguments as `base.arguments_read` reads them: a dict when `raw`
    is a JSON object within the bounds; otherwise the raw text, or
    `UnparsedArguments` saying why it was not read, for the engine to answer
    with an error result. No arguments at all is {}."""
    if raw is not None and not isinstance(raw, str | dict):
        raw = str(raw)  # a server's odd shape: read as the text it is
    return arguments_read(raw)


def _field(value, name: str):
    """`name` of an SDK model or of a JSON object as sent."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _reported(usage) -> Usage | None:
    """The tokens the server reports (`usage`), if it reports them."""
    prompt = _field(usage, "prompt_tokens")
    if not isinstance(prompt, int):
        return None
    cached = _field(_field(usage, "prompt_tokens_details"), "cached_tokens")
    output = _field(usage, "completion_tokens")
    return Usage(
        input_tokens=prompt,
        output_tokens=output if isinstance(output, int) else 0,
        cached_input_tokens=min(cached, prompt) if isinstance(cached, int) else 0,
    )


def _usage(usage, input_tokens: int, text: str | None, calls: list[ToolCall]) -> Usage:
    """The tokens the server reports (`usage`); counted locally (as the
    scripted model does) when it reports none — `input_tokens`, what the
    studio counted of the request, and the answer's text and calls — so a
    call is never free by omission."""
    reported = _reported(usage)
    if reported is not None:
        return reported
    output = count_tokens(text) + sum(
        count_tokens(c.name) + count_tokens(_arguments_text(c.arguments)) for c in calls
    )
    return Usage(input_tokens=input_tokens, output_tokens=output)


# --- errors --------------------------------------------------------------------------------


def _retries(error, lead: str = "") -> str:
    """ " after N retries" (after `lead`), from the retry count the SDK sent
    on its last try; "" when it did not retry."""
    request = getattr(error, "request", None)
    try:
        taken = int(request.headers.get("x-stainless-retry-count", 0)) if request is not None else 0
    except (TypeError, ValueError):
        taken = 0
    if taken <= 0:
        return ""
    return f"{lead} after {taken} {'retry' if taken == 1 else 'retries'}"


def _status_text(error) -> str:
    status = error.status_code
    meaning = STATUS_MEANING.get(status) or ("server error" if status >= 500 else "error")
    return f"{SERVER} answered {status} ({meaning}){_retries(error)}: {_detail(error)}"


def _detail(error) -> str:
    body = getattr(error, "body", None)
    detail = None
    if isinstance(body, dict):
        detail = body.get("message") or body.get("detail") or body.get("error")
        if not isinstance(detail, str):
            detail = json.dumps(body, ensure_ascii=False)
    elif isinstance(body, str) and body.strip():
        detail = body
    return _snippet(detail) if detail else "no message"


def _said(error) -> str:
    """The provider's own message in a refusal's body ("" when none)."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or body.get("error")
        if isinstance(message, dict):
            message = message.get("message")
        return message if isinstance(message, str) else ""
    return body if isinstance(body, str) else ""


def _said_with_code(error) -> str:
    """The refusal's code, type and message: what its class is read from."""
    parts = [getattr(error, "code", None), getattr(error, "type", None), _said(error)]
    return " ".join(part for part in parts if isinstance(part, str))


def _snippet(value) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = " ".join(str(value).split())
    if len(text) > DETAIL_MAX_CHARS:
        text = text[: DETAIL_MAX_CHARS - 3] + "..."
    return text
