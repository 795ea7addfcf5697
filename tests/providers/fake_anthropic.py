"""A small Anthropic Messages API on loopback, for testing the provider
through the official SDK (its httpx2 transport cannot be mocked in process).

The test scripts the answers: `fake.push(reply, ...)` queues them in order,
`fake.always(reply)` answers every request once the queue is empty. Every
request is recorded (`fake.requests`: path, lower-cased headers, JSON body).

    fake.push(message(tool_use("open_memory", {"name": "quest"})), message(text("Onward.")))
    fake.push(error(429, "rate_limit_error", "Slow down."), message(text("hi"), delay=0.2))

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

_ids = itertools.count(1)

DEFAULT_USAGE = {"input_tokens": 100, "output_tokens": 20}


@dataclass
class Reply:
    status: int
    body: dict | str
    headers: dict = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering


# --- building replies -------------------------------------------------------------------


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def tool_use(name: str, tool_input, *, id: str | None = None) -> dict:
    """A tool_use block; `tool_input` may be anything (a model can send a
    string or a list where an object belongs)."""
    return {"type": "tool_use", "id": id or f"toolu_{next(_ids):04d}", "name": name, "input": tool_input}


def message(
    *content: dict,
    usage: dict | None = None,
    stop_reason: str | None = None,
    model: str = "claude-test",
    delay: float = 0.0,
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
    return Reply(status=200, body=body, delay=delay)


def error(
    status: int,
    error_type: str,
    error_message: str,
    *,
    retry_after_ms: int | None = 10,
    delay: float = 0.0,
) -> Reply:
    """An Anthropic-shaped error. `retry_after_ms` (sent as `retry-after-ms`,
    which the SDK honours) keeps retries quick; None leaves the SDK's own
    backoff."""
    headers = {"request-id": f"req_{next(_ids):04d}"}
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
        self._queue: deque[Reply] = deque()
        self._always: Reply | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
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
        self._stopping.set()  # ends any delayed answer at once
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

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
                if reply.delay and fake._stopping.wait(reply.delay):
                    self.close_connection = True
                    return  # stopping: drop the answer
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
