"""The port every model provider implements: one model step, and one
compaction (summary plus rewrites of open memories). It imports no domain
module: the domain (`billing`, `memories`, the engine) imports what it
shares with the providers from here."""

import json
import logging
import queue
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from .causes import ANSWER_UNREADABLE, NOT_CONFIGURED, PROVIDER_TIMEOUT, PROVIDER_UNREACHABLE

log = logging.getLogger(__name__)


# The most tokens one model call's usage may count of each kind: more than
# any model's context, so only a count no provider bills is cut.
USAGE_MOST = 100_000_000


@dataclass(frozen=True)
class Usage:
    """A model call's token counts, as its provider reported them (what the
    ledger charges)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def __post_init__(self):
        # A count is the provider's word, read with bounds: below zero is
        # none (never a credit), and past any context a model has is cut.
        for name in ("input_tokens", "output_tokens", "cached_input_tokens"):
            value = getattr(self, name)
            if not 0 <= value <= USAGE_MOST:
                object.__setattr__(self, name, min(max(value, 0), USAGE_MOST))

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


# --- a model's output, read with bounds ---------------------------------------------------

# The most of a model's text an unread value keeps (what is stored and shown of it).
PREVIEW_CHARS = 2_000


def usage_total(usage: "Usage | None", more) -> "Usage | None":
    """`usage` and the usages in `more` added up (None when there is none
    of either): a call's bill with the attempts before it."""
    for each in more:
        usage = (
            each
            if usage is None
            else Usage(
                input_tokens=usage.input_tokens + each.input_tokens,
                output_tokens=usage.output_tokens + each.output_tokens,
                cached_input_tokens=usage.cached_input_tokens + each.cached_input_tokens,
            )
        )
    return usage


class UnparsedArguments(str):
    """Tool-call arguments the studio did not read: text that is not valid
    JSON, or a value nested deeper than STUDIO["MAX_OUTPUT_DEPTH"], or one
    over STUDIO["MAX_TOOL_ARGUMENTS_BYTES"]. The text is what the model
    sent, clipped to PREVIEW_CHARS; `reason` says what was wrong, as the
    end of a sentence about "the arguments" a model can act on ("were not
    valid JSON (…)", "are nested deeper than 32 levels"). Made from text
    alone, it reads the text for its reason."""

    reason: str

    def __new__(cls, text: str, reason: str | None = None):
        self = super().__new__(cls, text[:PREVIEW_CHARS])
        if reason is None:
            read = arguments_read(text)
            reason = read.reason if isinstance(read, UnparsedArguments) else "are not a JSON object"
        self.reason = reason
        return self


class OutputRefused(ValueError):
    """A model's JSON the studio does not read: `kind` is "invalid" (with
    the decoder's `detail`), "deep" (past `limit` levels) or "large"
    (`size` bytes, past `limit`)."""

    def __init__(self, kind: str, *, detail: str = "", size: int = 0, limit: int = 0):
        super().__init__(kind)
        self.kind, self.detail, self.size, self.limit = kind, detail, size, limit

    def said(self, *, plural: bool) -> str:
        """What was wrong, after its subject ("the arguments", "the answer")."""
        were, are = ("were", "are") if plural else ("was", "is")
        if self.kind == "deep":
            return f"{are} nested deeper than {self.limit} levels"
        if self.kind == "large":
            return f"{are} {self.size:,} bytes, over the {self.limit:,} bytes the studio reads"
        return f"{were} not valid JSON ({self.detail})"


def output_depth() -> int:
    return settings.STUDIO["MAX_OUTPUT_DEPTH"]


def json_bounded(text: str, *, max_depth: int, max_bytes: int | None = None) -> Any:
    """`text` decoded as JSON, or `OutputRefused`: over `max_bytes` (UTF-8),
    not valid JSON, or nested deeper than `max_depth`. The decoder recurses
    once per level: a value deep enough to reach the interpreter's limit
    raises RecursionError there, which is past any depth the studio reads;
    anything shallower is measured after, without recursion."""
    if max_bytes is not None and len(text) * 4 > max_bytes:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > max_bytes:
            raise OutputRefused("large", size=size, limit=max_bytes)
    try:
        value = json.loads(text)
    except RecursionError:
        raise OutputRefused("deep", limit=max_depth) from None
    except ValueError as error:
        raise OutputRefused("invalid", detail=str(error)) from None
    depth_check(value, max_depth)
    return value


def depth_check(value: Any, max_depth: int) -> None:
    """`OutputRefused("deep")` when `value` (decoded JSON: dicts, lists)
    nests deeper than `max_depth` containers; walked with a stack of its
    own, so any depth is safe to measure."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > max_depth:
            raise OutputRefused("deep", limit=max_depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))


def arguments_read(raw: Any) -> Any:
    """A tool call's arguments as the studio takes them. `raw` is the text
    the model sent (a str) or a value already decoded (an SDK's dict, a
    script's args). Nothing at all (None, blank text) is {}; a JSON object
    is its dict; a valid JSON value that is not an object is handed on as
    it came (the tools answer it with an error); anything over a bound
    (STUDIO["MAX_TOOL_ARGUMENTS_BYTES"], STUDIO["MAX_OUTPUT_DEPTH"]) or not
    valid JSON is `UnparsedArguments`, with its reason."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    max_bytes, max_depth = settings.STUDIO["MAX_TOOL_ARGUMENTS_BYTES"], output_depth()
    if isinstance(raw, str):
        try:
            value = json_bounded(raw, max_depth=max_depth, max_bytes=max_bytes)
        except OutputRefused as refused:
            return UnparsedArguments(raw, refused.said(plural=True))
        return value if isinstance(value, dict) else raw
    try:
        depth_check(raw, max_depth)
    except OutputRefused as refused:
        return UnparsedArguments(json_preview(raw), refused.said(plural=True))
    text = json.dumps(raw, ensure_ascii=False, default=str)  # safe: no deeper than max_depth
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return UnparsedArguments(text, OutputRefused("large", size=size, limit=max_bytes).said(plural=True))
    return raw


_ITEM = object()  # a list item's key, in `json_preview`


def json_preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """The start of `value`'s JSON, `limit` characters at most, written
    with a stack of its own (any depth is safe) and stopping at the limit."""
    out: list[str] = []
    size = 0
    stack: list[list] = [[iter([(_ITEM, value)]), "", 0]]  # [pairs, closing, written]
    while stack and size < limit:
        frame = stack[-1]
        try:
            key, item = next(frame[0])
        except StopIteration:
            stack.pop()
            piece = frame[1]
        else:
            piece = ", " if frame[2] else ""
            frame[2] += 1
            if key is not _ITEM:
                piece += json.dumps(str(key), ensure_ascii=False) + ": "
            if isinstance(item, dict):
                piece += "{"
                stack.append([iter(item.items()), "}", 0])
            elif isinstance(item, list | tuple):
                piece += "["
                stack.append([((_ITEM, child) for child in item), "]", 0])
            else:
                piece += json.dumps(item, ensure_ascii=False, default=str)[:limit]
        out.append(piece)
        size += len(piece)
    return "".join(out)[:limit]


# How often a call in a helper thread looks for a cancel of its turn, for a
# control that is not rung when the turn is woken (`Control.quiet_seconds`).
POLL_SECONDS = 0.2
# A turn keeps its database connection for this long into a model call,
# and a slower call's turn gives it back then (engine._Control.hold_release).
FIRST_POLL_SECONDS = 0.05

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


# What a game is told of a failed call (`ProviderError.public`), by kind.
UNCONFIGURED = "this studio is not set up to reach the model's provider"
UNREACHABLE = "the model provider could not be reached"
TIMED_OUT = "the model provider did not answer in time"
BROKE_OFF = "the model's answer broke off before it ended"
UNREADABLE = "the model's answer could not be read"


def status_public(status: int, names: dict[int, str] | None = None) -> str:
    """A provider's refusal, as a game is told it: its status and what it means."""
    name = (names or STATUS_NAMES).get(status) or ("server error" if status >= 500 else "error")
    return f"the model provider answered {status} ({name})"


class ProviderError(Exception):
    """The model call failed; the message says why, for the turn's `error`.

    What the provider bills for it: `usage`, when it reported one before
    the call failed (an answer it refused to finish, one that does not
    validate); otherwise, with `reached`, the provider took the request but
    its usage never arrived (the answer broke off, or never came in time):
    the input sent is what it bills. Neither: it refused the request or
    could not be reached, and bills nothing.

    `public`: what a game and its designers are told — the kind of failure,
    never the provider's address or what its server said (the message,
    for the operator's log, may hold both).

    `failed_attempts`: the earlier attempts of the call (the studio retries
    it) that failed in a way the provider could bill, each with what it
    bills; the failure itself is not among them.

    `cause`: its class for a designer (`causes`: `rate_limited`,
    `model_not_found`…; by default the one `public` implies, "" for none),
    and `said`: the provider's own words, already scrubbed of secrets and
    addresses (`causes.words`)."""

    def __init__(
        self,
        message: str = "",
        *,
        usage: "Usage | None" = None,
        reached: bool = False,
        public: str = "the model provider's call failed",
        failed_attempts: "list[Usage] | None" = None,
        cause: str = "",
        said: str = "",
    ):
        super().__init__(message)
        self.usage, self.reached, self.public = usage, reached or usage is not None, public
        self.failed_attempts: list[Usage] = list(failed_attempts or ())
        self.cause = cause or PUBLIC_CAUSES.get(public, "")
        self.said = said

    @property
    def kind(self) -> str:
        """The kind of failure, one of a few (for the metrics): the class of
        the status a provider refused with ('4xx', '5xx'; '429' on its
        own: a rate limit), 'timeout', 'unreachable', 'broke_off',
        'unreadable', 'unconfigured', or 'other' (an answer the studio
        could not use, say)."""
        if status := _REFUSED.match(self.public):
            return "429" if status.group(1) == "429" else f"{status.group(1)[0]}xx"
        return PUBLIC_KINDS.get(self.public, "other")


# What `status_public` writes, and the kinds of the other failures, by what
# a game is told of them.
_REFUSED = re.compile(r"the model provider answered (\d{3}) ")
PUBLIC_KINDS = {
    TIMED_OUT: "timeout",
    UNREACHABLE: "unreachable",
    BROKE_OFF: "broke_off",
    UNREADABLE: "unreadable",
    UNCONFIGURED: "unconfigured",
}
# The class (`causes`) of the failures whose kind says it all.
PUBLIC_CAUSES = {
    TIMED_OUT: PROVIDER_TIMEOUT,
    UNREACHABLE: PROVIDER_UNREACHABLE,
    BROKE_OFF: ANSWER_UNREADABLE,
    UNREADABLE: ANSWER_UNREADABLE,
    UNCONFIGURED: NOT_CONFIGURED,
}


def request_sent(error: BaseException) -> bool:
    """Whether a call that failed with `error` (an SDK's connection error
    or timeout) got its request to the provider: False only when it never
    connected."""
    import httpx2

    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return not any(isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout) for e in chain)


class Cancelled(Exception):
    """The turn was cancelled while the model was working."""


class Control:
    """What a provider may ask of the running turn while it works."""

    def check(self) -> None:
        """Raise `Cancelled` if the turn has been cancelled."""
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        """Wait, ending early with `Cancelled` when the turn is cancelled."""
        raise NotImplementedError

    def quiet_seconds(self) -> float:
        """How long a caller blocked on something else (a model call) may
        go without calling `check`, unless rung (`ringing`)."""
        return POLL_SECONDS

    @contextmanager
    def ringing(self, ring: Callable[[], None]):
        """While inside, `ring` is called (from another thread) when the
        turn is woken, so that a caller blocked elsewhere checks at once."""
        yield


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
    # The most tokens the step may write (None: STUDIO["MODEL_MAX_OUTPUT_TOKENS"]).
    max_output_tokens: int | None = None
    # The game's tools among `tools`, each {"name", "description",
    # "parameters", …} as the agent's definition keeps it.
    game_tools: list[dict] = field(default_factory=list)
    # Whether, should the call's failed attempts bill these, the payer still
    # covers them and one more attempt (`retries.Tries`): a billed attempt is
    # retried only then. None: retried as the settings allow.
    retry_within: "Callable[[list[Usage]], bool] | None" = None

    def output_limit(self) -> int:
        return self.max_output_tokens or settings.STUDIO["MODEL_MAX_OUTPUT_TOKENS"]


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
    # Attempts of this call that failed before it answered, in a way the
    # provider could bill (a timeout, a connection dropped once the request
    # was sent), each with what it bills: owed beside `usage`.
    failed_attempts: list[Usage] = field(default_factory=list)


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
    # As ModelRequest's: whether a billed attempt may be retried.
    retry_within: "Callable[[list[Usage]], bool] | None" = None


@dataclass
class CompactionReply:
    summary: str
    rewrites: dict[str, str]  # open memory name -> new content
    usage: Usage = field(default_factory=Usage)
    failed_attempts: list[Usage] = field(default_factory=list)  # as ModelReply's


@dataclass(frozen=True)
class CallEnd:
    """How a model call ended, as far as its bill goes: the usage the
    provider reported (None: none came), whether the provider took the
    request at all, and the text it wrote (to count when no usage came);
    and the call's earlier attempts that failed in a way the provider could
    bill (`ModelReply.failed_attempts`), owed beside it."""

    usage: Usage | None
    reached: bool
    text: str
    failed_attempts: tuple[Usage, ...] = ()


class _ReadLimit(BaseException):
    """An abandoned call read for as long as it may be: closed unfinished.
    (Not an Exception: a provider's reading takes every Exception for an
    answer it could not read, and this is no such thing.)"""


class AbandonedCall:
    """A model call its turn stopped waiting for (a cancel, the deadline).

    The provider bills it all the same, so it is not dropped: it goes on in
    its helper thread, its text no longer passed on, and is read to its end
    for the usage the provider reports — or, once it has gone on for
    `read_limit` seconds more, closed at its next piece, unfinished.
    `when_ended(fn)` calls `fn(CallEnd)` once it has ended: at once, in the
    caller's thread, if it already has; else in the call's own thread."""

    # `tries`: the call's `retries.Tries` (not imported here: it imports this module).
    def __init__(self, usage_of: Callable[[Any], Usage], read_limit: float, tries: Any = None):
        self.usage_of, self.read_limit, self.tries = usage_of, read_limit, tries
        self.pieces: list[str] = []
        self.abandoned_at: float | None = None
        self._lock = threading.Lock()
        self._end: CallEnd | None = None
        self._callbacks: list[Callable[[CallEnd], None]] = []

    def abandon(self) -> None:
        self.abandoned_at = time.monotonic()
        if self.tries is not None:
            self.tries.abandoned.set()  # no more attempts for a turn nobody waits for

    def _failed_attempts(self) -> tuple[Usage, ...]:
        return tuple(self.tries.failed) if self.tries is not None else ()

    def read_on(self) -> bool:
        """Whether an abandoned call still reads (False: close it now)."""
        return time.monotonic() - self.abandoned_at < self.read_limit

    def ended(self, *, value: Any = None, error: BaseException | None = None) -> None:
        text, failed = "".join(self.pieces), self._failed_attempts()
        if error is None:
            end = CallEnd(self.usage_of(value), True, text, failed)
        elif isinstance(error, ProviderError):
            end = CallEnd(error.usage, error.reached, text, failed)
        else:  # closed unfinished, or broke in a way of its own: the request was sent
            end = CallEnd(None, True, text, failed)
        with self._lock:
            self._end, callbacks, self._callbacks = end, self._callbacks, []
        for callback in callbacks:
            callback(end)

    def end_now(self) -> CallEnd:
        """How the call stands, as if it ended now: what it wrote so far,
        and no usage (the process that made it is about to exit)."""
        return self._end or CallEnd(None, True, "".join(self.pieces), self._failed_attempts())

    def when_ended(self, fn: Callable[[CallEnd], None]) -> None:
        with self._lock:
            if self._end is None:
                self._callbacks.append(fn)
                return
        fn(self._end)


class CallThreads:
    """Threads kept between jobs, named `name`: model calls' by default,
    or a send's that runs on without its request (engine.SEND_THREADS). A
    job goes to the thread that finished one last, or to a new thread when
    none is free; a thread left free for `keep_seconds` ends. Jobs are
    numbered as they start (`started` counts them); `wait_quiet` waits
    until none is running (an abandoned model call included)."""

    # Speed: a thread started (and ended) for every model call; guarded by bench/agent_server.py (server CPU per message).
    def __init__(self, keep_seconds: float = 30.0, name: str = "model-call"):
        self.keep_seconds, self.name = keep_seconds, name
        self.lock = threading.Lock()
        self.quiet = threading.Condition(self.lock)
        self.free: list[queue.SimpleQueue] = []  # each free thread's inbox, the latest freed last
        self.running: set[int] = set()
        self.started = 0

    def run(self, job: Callable[[], None]) -> None:
        with self.lock:
            call = (self.started, job)
            self.started += 1
            self.running.add(call[0])
            if self.free:
                self.free.pop().put(call)
                return
        threading.Thread(target=self._serve, args=(call,), name=self.name, daemon=True).start()

    def _serve(self, call: tuple[int, Callable[[], None]]) -> None:
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        while True:
            number, job = call
            try:
                job()
            except Exception:  # a call's own failures are its caller's; this is a fault of the studio's
                log.exception("a %s thread caught a failure its job did not", self.name)
            finally:
                with self.lock:
                    self.running.discard(number)
                    self.free.append(inbox)
                    self.quiet.notify_all()
            try:
                call = inbox.get(timeout=self.keep_seconds)
            except queue.Empty:
                with self.lock:
                    if inbox in self.free:
                        self.free.remove(inbox)
                        return
                call = inbox.get()  # handed a call just as the wait ran out

    def wait_quiet(self, timeout: float, *, since: int = 0) -> bool:
        """Whether every call is over within `timeout` seconds; with `since`
        (a `started` read earlier), every call started from then on."""
        with self.lock:
            return self.quiet.wait_for(lambda: all(number < since for number in self.running), timeout)


CALL_THREADS = CallThreads()


def call_cancellable(
    fn,
    control: Control,
    on_text: Callable[[str], None] | None = None,
    *,
    usage_of: Callable[[Any], Usage] = lambda value: None,
    read_limit: float = 60.0,
    tries: Any = None,
):
    """Run `fn(emit)` (a blocking SDK call) in a helper thread (`CALL_THREADS`), checking the
    turn for a cancel while it runs. Text the call hands to `emit` as it
    streams reaches `on_text` here, in the caller's thread. Exceptions of
    `fn` are raised here.

    On cancel (anything `control.check` raises), that is raised at once,
    with the call, an `AbandonedCall`, as its `call` attribute: the call
    goes on in the background until the provider's usage arrives (the value
    `fn` returns, read by `usage_of`) or `read_limit` seconds pass. With
    `tries` (the `Tries` that `fn` retries with), an abandoned call makes no
    further attempt, and its end carries the attempts that failed billed."""
    outbox: queue.SimpleQueue = queue.SimpleQueue()
    call = AbandonedCall(usage_of, read_limit, tries)

    def emit(piece: str) -> None:
        call.pieces.append(piece)
        if call.abandoned_at is None:
            outbox.put(("text", piece))
        elif not call.read_on():
            raise _ReadLimit()

    def target():
        try:
            value = fn(emit)
        except BaseException as error:  # handed to the caller below
            outbox.put(("error", error))
            call.ended(error=error)
        else:
            outbox.put(("value", value))
            call.ended(value=value)

    CALL_THREADS.run(target)
    try:
        # Speed: a wake-up of the waiting turn's thread every 0.2 s of a model call for nothing; guarded by bench/players.py (CPU a second per send waiting on the model).
        with control.ringing(lambda: outbox.put(("rung", None))):
            while True:
                try:
                    kind, item = outbox.get(timeout=control.quiet_seconds())
                except queue.Empty:
                    control.check()
                    continue
                if kind == "value":
                    return item
                if kind == "error":
                    break
                if kind == "text" and on_text is not None:
                    on_text(item)
                control.check()
    except BaseException as stop:
        call.abandon()
        stop.call = call
        raise
    raise item


class ClientCache:
    """SDK clients kept per process, by what configures them. Building one
    (its HTTP client, TLS context and pool) would otherwise be paid on every
    model call; a kept one also keeps its connections alive between calls.
    The SDK clients are safe to share between threads."""

    # Speed: ~20 ms and a new connection per model call; guarded by bench/agent_server.py (new model connections per message).
    def __init__(self):
        self.clients: dict = {}
        self.lock = threading.Lock()

    def get(self, key: tuple, build):
        with self.lock:
            client = self.clients.get(key)
            if client is None:
                client = self.clients[key] = build()
            return client


class ConversationRuns:
    """Per process, for a provider that encodes a conversation only where it
    is new: each conversation's last request as the provider encoded it (a
    run: an object with `messages`, the ones it holds, and `bytes`, what it
    keeps), by its first message — the same object from one send to the
    next, since agents.sending.context keeps an agent's history messages
    until a checkpoint folds them. A run is taken out while its call extends
    it (one call's at a time) and kept again after; the least recently used
    go once the runs hold more than `max_bytes`."""

    def __init__(self, max_bytes: int = 32 * 2**20):
        self.max_bytes = max_bytes
        self.runs: OrderedDict[int, Any] = OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()

    def taken(self, messages: list, *, fits: Callable[[Any], bool] = lambda run: True) -> tuple[Any, int]:
        """The run `messages` extend, taken out, and how many of them it
        holds; (None, 0) when there is none, or it does not `fit` this
        request. Equal, not only the same objects: the last turn's messages
        are made again from its entries when its block joins the history."""
        with self.lock:
            run = self.runs.pop(id(messages[0]), None)
            self.bytes -= run.bytes if run is not None else 0
        if run is None or not fits(run):
            return None, 0
        known = len(run.messages)
        if known > len(messages) or messages[:known] != run.messages:
            return None, 0
        return run, known

    def keep(self, run) -> None:
        """Keep `run` (its `messages` set) as its conversation's, in place of any other."""
        key = id(run.messages[0])
        with self.lock:
            gone = self.runs.pop(key, None)  # another call's, for the same conversation
            self.bytes += run.bytes - (gone.bytes if gone is not None else 0)
            self.runs[key] = run
            while self.bytes > self.max_bytes:
                _, gone = self.runs.popitem(last=False)
                self.bytes -= gone.bytes
