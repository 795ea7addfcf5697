"""`anthropic:<model>`: Anthropic's Messages API, through the official SDK.

A model step is one streamed call (the SDK's message stream): its text goes
to the request's `on_text` as it comes, and the message it adds up to is
read as a whole, tool calls and usage included. The system prompt goes in
`system`; the checkpoint's context block is the first content block of the
first user message, marked `cache_control: ephemeral`, so the prefix that
stays the same between compactions (tools, system, block) is read from
Anthropic's prompt cache; then the neutral messages of `agents.sending.context`,
converted to the Messages API's shape:

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
`ANTHROPIC_BASE_URL`, `STUDIO["MODEL_TIMEOUT_SECONDS"]`,
`STUDIO["MODEL_MAX_RETRIES"]`), read from `django.conf.settings` at each
call and kept by `ClientCache`: the SDK retries 408/409/429/5xx (529,
overloaded, among them) and timeouts itself, with backoff. A model step
runs under `call_cancellable`, so a cancelled turn stops waiting at once
(and stops reading the stream).
Every failure becomes a `ProviderError` whose message says what a designer
can do about it.

The compactor is one call with a forced tool call, `write_checkpoint`,
whose input schema is the compactor's answer shape (a cancel ends a turn,
never a compaction, so this call is not run under `call_cancellable`).
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anthropic
import httpx2
from django.conf import settings

from .base import (
    BROKE_OFF,
    TIMED_OUT,
    UNCONFIGURED,
    UNREACHABLE,
    ClientCache,
    CompactionReply,
    ModelReply,
    ProviderError,
    ToolCall,
    Usage,
    call_cancellable,
    request_sent,
    status_public,
)
from .base import STATUS_NAMES as HTTP_STATUS_NAMES
from .prompts import (
    COMPACTION_SCHEMA,
    COMPACTOR_INSTRUCTIONS,
    compaction_output_tokens,
    compaction_parse,
    compaction_prompt,
    messages_tools,
)

if TYPE_CHECKING:
    from .base import CompactionRequest, Control, ModelRequest

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
        params = {
            "model": self.model,
            "max_tokens": conf.max_output_tokens,
            "messages": request_messages(request, tools_offered=bool(request.tools)),
        }
        if request.system.strip():
            params["system"] = request.system
        if request.tools:
            params["tools"] = messages_tools(request.tools)
        message = call_cancellable(
            lambda emit: self._stream(conf, params, emit),
            control,
            request.on_text,
            usage_of=lambda whole: _usage(whole.usage),
            read_limit=conf.timeout,
        )
        return self._reply(message, conf)

    def _reply(self, message, conf: _Conf) -> ModelReply:
        text = _text_of(message.content)
        calls = [
            ToolCall(id=block.id, name=block.name, arguments=block.input)
            for block in message.content
            if getattr(block, "type", None) == "tool_use"
        ]
        stop, usage = message.stop_reason, _usage(message.usage)
        if stop == "max_tokens" and calls and getattr(message.content[-1], "type", None) == "tool_use":
            raise ProviderError(
                f"Anthropic stopped at the output limit ({conf.max_output_tokens} tokens) in the middle "
                f"of a {calls[-1].name} call; raise STUDIO_MODEL_MAX_OUTPUT_TOKENS.",
                usage=usage,
                public=f"the model stopped at its output limit in the middle of a {calls[-1].name} call",
            )
        if text is None and not calls and stop in ("max_tokens", "refusal", "model_context_window_exceeded"):
            said = _empty_stop_message(stop, conf)
            raise ProviderError(said, usage=usage, public=said.split(";")[0].rstrip("."))
        return ModelReply(text=text, tool_calls=calls, usage=usage)

    # --- the compactor ------------------------------------------------------------------

    def summarize(self, request: CompactionRequest) -> CompactionReply:
        conf = _conf()
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
        with self._errors(conf):
            message = self._client(conf).messages.create(**params)
        usage = _usage(message.usage)
        call = next(
            (
                block
                for block in message.content
                if getattr(block, "type", None) == "tool_use" and block.name == CHECKPOINT_TOOL
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
        return compaction_parse(call.input, request, usage)

    # --- the call --------------------------------------------------------------------

    def _stream(self, conf: _Conf, params: dict, emit):
        """One streamed message, read to its end, its text handed to `emit`
        as it comes; returns the whole message."""
        with self._errors(conf):
            with self._client(conf).messages.stream(**params) as stream:
                for event in stream:
                    if event.type == "text":
                        emit(event.text)
                message = stream.get_final_message()
        if message.stop_reason is None:
            # What message_start reported (the input, and the output so far) is what it bills.
            raise ProviderError(
                "Anthropic's stream ended before the message did (no stop reason): the connection may have dropped.",
                usage=_usage(message.usage),
                public=BROKE_OFF,
            )
        return message

    @staticmethod
    def _client(conf: _Conf):
        return _clients.get(
            (conf.api_key, conf.base_url, conf.timeout, conf.max_retries),
            lambda: anthropic.Anthropic(
                api_key=conf.api_key,
                base_url=conf.base_url,
                timeout=conf.timeout,
                max_retries=conf.max_retries,
            ),
        )

    @contextmanager
    def _errors(self, conf: _Conf):
        """SDK failures — and a stream's, which come as the HTTP client's
        own once it has started — as `ProviderError`s."""
        try:
            yield
        except anthropic.APIStatusError as error:
            raise ProviderError(
                _status_message(error, self.model), public=status_public(error.status_code, STATUS_NAMES)
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
            raise ProviderError(f"the Anthropic SDK failed: {error}", reached=True) from error


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
        add(
            "user",
            [{"type": "text", "text": request.context_block, "cache_control": {"type": "ephemeral"}}],
        )
    ids = _ToolIds()
    for message in request.messages:
        role = message["role"]
        if role == "tool":
            add("user", _tool_result_blocks(message, ids, tools_offered))
        elif role == "assistant":
            blocks = _text_blocks(message.get("content"))
            for call in message.get("toolCalls") or ():
                blocks.extend(_tool_use_blocks(call, ids, tools_offered))
            add("assistant", blocks)
        else:
            add("user", _text_blocks(message.get("content")))
    if not turns or turns[0]["role"] != "user":
        # The API starts with the user; a history never should not, but
        # a message saying so beats a refused request.
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(The scene continues.)"}]})
    return turns


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

    def for_call(self, recorded) -> str:
        wire = str(recorded or "")
        if not TOOL_ID.match(wire):
            wire = re.sub(r"[^A-Za-z0-9_-]", "_", wire)[:48] or "call"
        base, n = wire, 1
        while wire in self.used:
            n += 1
            wire = f"{base[:56]}_{n}"
        self.used.add(wire)
        self.sent[str(recorded)] = wire
        return wire

    def for_result(self, recorded) -> str | None:
        return self.sent.get(str(recorded))


def _tool_use_blocks(call: dict, ids: _ToolIds, tools_offered: bool) -> list[dict]:
    arguments = call.get("arguments")
    if not tools_offered:
        shown = json.dumps(arguments, ensure_ascii=False)
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


def _text_of(content) -> str | None:
    """The reply's text: adjacent text blocks (split by citations) joined as
    they are, separate runs of text as paragraphs. None when there is none."""
    runs: list[str] = []
    in_run = False
    for block in content:
        if getattr(block, "type", None) == "text":
            if in_run:
                runs[-1] += block.text
            else:
                runs.append(block.text)
            in_run = True
        else:
            in_run = False
    text = "\n\n".join(run for run in runs if run.strip())
    return text or None


def _usage(usage) -> Usage:
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    return Usage(
        input_tokens=(usage.input_tokens or 0) + cache_read + cache_write,
        output_tokens=usage.output_tokens or 0,
        cached_input_tokens=cache_read,
    )


def _empty_stop_message(stop: str, conf: _Conf) -> str:
    if stop == "max_tokens":
        return (
            f"Anthropic stopped at the output limit ({conf.max_output_tokens} tokens) before saying "
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
