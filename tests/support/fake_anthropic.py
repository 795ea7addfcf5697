"""A small Anthropic Messages API on loopback, for testing the provider
through the official SDK (its httpx2 transport cannot be mocked in process).

The test scripts the answers: `fake.push(reply, ...)` queues them in order,
`fake.always(reply)` answers every request once the queue is empty. Every
request is recorded (`fake.requests`: path, lower-cased headers, JSON body).

    fake.push(message(tool_use("open_memory", {"name": "quest"})), message(text("Onward.")))
    fake.push(error(429, "rate_limit_error", "Slow down."), message(text("hi"), delay=0.2))

A request that asks for a stream (`"stream": true`) gets a message as the
server-sent events Anthropic sends: `message_start` (with the input usage),
each content block's start, its pieces (text in words, `pause` seconds
apart; tool input as JSON, an object in two halves) and stop, `message_delta` (the stop
reason and output tokens), `message_stop`; `cut_after=N` drops the
connection after N events, and `events=[...]` streams those instead.
A tool's input may be given as the JSON text to stream
(`tool_use(name, json_text=...)`), for input no encoder here would write
(nested 2,000 deep, say).

The fixture `fake_anthropic_fixture` (used as `fake`) starts one, points the
settings at it (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY "test-key", quick
retries and timeout) and stops it after the test.
"""

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.sse import pieces, write_events

_ids = itertools.count(1)

DEFAULT_USAGE = {"input_tokens": 100, "output_tokens": 20}


@dataclass
class Reply:
    status: int
    body: dict | str
    headers: dict = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering
    pause: float = 0.0  # when streamed: seconds between events
    cut_after: int | None = None  # when streamed: events sent before the connection drops
    events: list | None = None  # when streamed: these (name, data) events instead of the body's


# --- building replies -------------------------------------------------------------------


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def tool_use(name: str, tool_input=None, *, id: str | None = None, json_text: str | None = None) -> dict:
    """A tool_use block; `tool_input` may be anything (a model can send a
    string or a list where an object belongs). With `json_text`, the input
    streams as that text (and is {} in a whole message)."""
    block = {"type": "tool_use", "id": id or f"toolu_{next(_ids):04d}", "name": name, "input": tool_input}
    if json_text is not None:
        block["input"], block["_json_text"] = {}, json_text
    return block


def message(
    *content: dict,
    usage: dict | None = None,
    stop_reason: str | None = None,
    model: str = "claude-test",
    delay: float = 0.0,
    pause: float = 0.0,
    cut_after: int | None = None,
    events: list | None = None,
) -> Reply:
    if stop_reason is None:
        stop_reason = "tool_use" if any(block["type"] == "tool_use" for block in content) else "end_turn"
    body = {
        "id": f"msg_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {**DEFAULT_USAGE, **(usage or {})},
    }
    return Reply(status=200, body=body, delay=delay, pause=pause, cut_after=cut_after, events=events)


def stream_events(body: dict) -> list[tuple[str, dict]]:
    """A message as the events of its stream."""
    usage = body["usage"]
    start = {**body, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            opened = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in pieces(block["text"])]
        else:
            opened = {k: v for k, v in block.items() if k != "_json_text"} | {"input": {}}
            raw = block.get("_json_text") or json.dumps(block["input"])
            # An object in two halves; anything else (a model's mistake) whole.
            parts = (raw[: len(raw) // 2], raw[len(raw) // 2 :]) if raw.startswith("{") else (raw,)
            deltas = [{"type": "input_json_delta", "partial_json": part} for part in parts]
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": opened})
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    ending = {"stop_reason": body["stop_reason"], "stop_sequence": None}
    events.append(
        (
            "message_delta",
            {"type": "message_delta", "delta": ending, "usage": {"output_tokens": usage["output_tokens"]}},
        )
    )
    return events + [("message_stop", {"type": "message_stop"})]


def error(
    status: int,
    error_type: str,
    error_message: str,
    *,
    retry_after_ms: int | None = 10,
    delay: float = 0.0,
    headers: dict | None = None,
) -> Reply:
    """An Anthropic-shaped error. `retry_after_ms` (sent as `retry-after-ms`,
    which the studio honours, as the SDK does) keeps retries quick; None
    leaves the backoff. `headers`: more to send."""
    headers = {"request-id": f"req_{next(_ids):04d}", **(headers or {})}
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
    body = {"type": "error", "error": {"type": error_type, "message": error_message}}
    return Reply(status=status, body=body, headers=headers, delay=delay)


NOTHING_SCRIPTED = Reply(
    status=500,
    body={
        "type": "error",
        "error": {"type": "api_error", "message": "fake_anthropic: no reply was scripted"},
    },
    headers={"x-should-retry": "false"},
)


# --- the server --------------------------------------------------------------------------


@dataclass
class Recorded:
    path: str
    headers: dict
    body: dict


class FakeAnthropic:
    def __init__(self):
        self.requests: list[Recorded] = []
        self.answered: list[int] = []  # the status of each answer sent in full, in order
        self._queue: deque[Reply] = deque()
        self._always: Reply | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._released = threading.Event()  # delayed answers are sent at once
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False  # stop() does not wait for idle keep-alive connections
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-anthropic",
            daemon=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "FakeAnthropic":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # ends any delayed answer at once, dropping it
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def release(self) -> None:
        """Send every delayed answer now, and any later one without its delay."""
        self._released.set()

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def always(self, reply: Reply | None) -> None:
        """Answer with `reply` whenever the queue is empty."""
        with self._lock:
            self._always = reply

    @property
    def bodies(self) -> list[dict]:
        return [request.body for request in self.requests]

    def _next(self) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            return self._always or NOTHING_SCRIPTED

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30  # an idle keep-alive connection is dropped after this

            def do_POST(self):  # noqa: N802 — the http.server name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsed": raw.decode("utf-8", "replace")}
                path = self.path.split("?", 1)[0]
                with fake._lock:
                    fake.requests.append(
                        Recorded(
                            path=path, headers={k.lower(): v for k, v in self.headers.items()}, body=body
                        )
                    )
                if path != "/v1/messages":
                    reply = error(
                        404, "not_found_error", f"fake_anthropic serves POST /v1/messages, not {path}"
                    )
                else:
                    reply = fake._next()
                if reply.delay and fake._released.wait(reply.delay) and fake._stopping.is_set():
                    self.close_connection = True
                    return  # stopping: drop the answer
                if body.get("stream") and reply.status == 200 and isinstance(reply.body, dict):
                    events = reply.events or stream_events(reply.body)
                    if write_events(
                        self, events, pause=reply.pause, stopping=fake._stopping, cut_after=reply.cut_after
                    ):
                        fake.answered.append(200)
                    return
                self._answer(reply)

            def _answer(self, reply: Reply):
                data = (reply.body if isinstance(reply.body, str) else json.dumps(reply.body)).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                    fake.answered.append(reply.status)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (a timeout)

            def log_message(self, format, *args):  # quiet
                return

        return Handler


@pytest.fixture(name="fake")
def fake_anthropic_fixture(settings):
    """A running FakeAnthropic the settings point at, with quick SDK retries
    (2) and a short timeout (5 s); stopped after the test."""
    fake = FakeAnthropic().start()
    settings.ANTHROPIC_BASE_URL = fake.url
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.STUDIO = {**settings.STUDIO, "MODEL_MAX_RETRIES": 2, "MODEL_TIMEOUT_SECONDS": 5.0}
    try:
        yield fake
    finally:
        fake.stop()
