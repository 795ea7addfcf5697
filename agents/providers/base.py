"""The port every model provider implements: one model step, and one
compaction (summary plus rewrites of open memories). It imports no domain
module: the domain (`billing`, `memories`, the engine) imports what it
shares with the providers from here."""

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Usage:
    """A model call's token counts, as its provider reported them (what the
    ledger charges)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class UnparsedArguments(str):
    """The text a model sent as a tool call's arguments when it was not
    valid JSON (providers hand it on as this, so the error can say so)."""


# How often a call in a helper thread looks for a cancel of its turn.
POLL_SECONDS = 0.05

# A provider's HTTP status, in words for a turn's error (each provider adds
# its own advice to some).
STATUS_NAMES = {
    400: "bad request",
    401: "unauthorized",
    402: "payment required",
    403: "forbidden",
    404: "not found",
    408: "request timeout",
    409: "conflict",
    413: "request too large",
    422: "unprocessable request",
    429: "rate limited",
    500: "server error",
    502: "bad gateway",
    503: "unavailable",
    504: "gateway timeout",
}


class ProviderError(Exception):
    """The model call failed; the message says why, for the turn's `error`."""


class Cancelled(Exception):
    """The turn was cancelled while the model was working."""


class Control(Protocol):
    """What a provider may ask of the running turn while it works."""

    def check(self) -> None:
        """Raise `Cancelled` if the turn has been cancelled."""

    def sleep(self, seconds: float) -> None:
        """Wait, ending early with `Cancelled` when the turn is cancelled."""


class NoControl:
    def check(self) -> None:
        return None

    def sleep(self, seconds: float) -> None:
        import time

        time.sleep(seconds)


@dataclass
class ModelRequest:
    system: str
    context_block: str | None
    messages: list[dict]
    tools: list[str]
    # The context's tokens, summed from stored counts (providers that report
    # their own usage ignore it).
    input_tokens: int = 0
    # Called, in the caller's thread, with each piece of text as the model
    # writes it: the pieces of a step, joined, are exactly its `text`.
    on_text: Callable[[str], None] | None = None


@dataclass
class ToolCall:
    id: str
    name: str
    # A dict when the model sent a JSON object; otherwise the raw value it
    # sent (text that is not JSON, a list, a number…), which the engine
    # answers with a tool error.
    arguments: Any


@dataclass
class ModelReply:
    text: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


@dataclass
class CompactionRequest:
    system: str
    previous_summary: str | None
    messages: list[dict]  # the folded blocks, as model messages
    open_memories: list[dict]  # {"name", "description", "content", "version"}
    # The most tokens the new summary may take (0: no limit), so a checkpoint
    # always leaves the agent room inside maxTokens.
    summary_max_tokens: int = 0
    # The agent's maxOpenTokens (0: none), a guideline for the rewrites.
    max_open_tokens: int = 0


@dataclass
class CompactionReply:
    summary: str
    rewrites: dict[str, str]  # open memory name -> new content
    usage: Usage = field(default_factory=Usage)


def call_cancellable(fn, control: Control, on_text: Callable[[str], None] | None = None):
    """Run `fn(emit)` (a blocking SDK call) in a helper thread, checking the
    turn for a cancel while it runs. Text the call hands to `emit` as it
    streams reaches `on_text` here, in the caller's thread. On cancel,
    `Cancelled` is raised at once; the abandoned call stops at its next
    `emit` (or finishes or times out on its own) and its answer is dropped.
    Exceptions of `fn` are raised here."""
    outbox: queue.SimpleQueue = queue.SimpleQueue()
    abandoned = threading.Event()

    def emit(piece: str) -> None:
        if abandoned.is_set():
            raise Cancelled()
        outbox.put(("text", piece))

    def target():
        try:
            outbox.put(("value", fn(emit)))
        except BaseException as error:  # handed to the caller below
            outbox.put(("error", error))

    threading.Thread(target=target, name="model-call", daemon=True).start()
    try:
        while True:
            try:
                kind, item = outbox.get(timeout=POLL_SECONDS)
            except queue.Empty:
                control.check()
                continue
            if kind == "value":
                return item
            if kind == "error":
                raise item
            if on_text is not None:
                on_text(item)
            control.check()
    except BaseException:
        abandoned.set()
        raise


class ClientCache:
    """SDK clients kept per process, by what configures them. Building one
    (its HTTP client, TLS context and pool) would otherwise be paid on every
    model call; a kept one also keeps its connections alive between calls.
    The SDK clients are safe to share between threads."""

    def __init__(self):
        self.clients: dict = {}
        self.lock = threading.Lock()

    def get(self, key: tuple, build):
        with self.lock:
            client = self.clients.get(key)
            if client is None:
                client = self.clients[key] = build()
            return client
