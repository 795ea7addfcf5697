"""A small OpenAI-compatible chat-completions server on loopback, for
testing the `openai:` provider through the official SDK (which talks
httpx2: HTTP mocks do not intercept it, a real socket does).

It records every request (path, headers, JSON body) and answers from a
queue of scripted answers the test pushes — a completion with text, with
tool calls, an error status with an OpenAI-shaped body, any of them after
a delay. When the queue is empty it answers with `fallback` (set it with
`always(...)`), or a 500 saying the test scripted too few answers.

    fake.push(completion("Hello."))
    fake.push(completion(tool_calls=[tool_call("open_memory", {"name": "quest"})]))
    fake.push(error(429, "Slow down."), completion("Now it works."))
    fake.always(error(500, "The server is on fire."))

A request that asks for a stream (`"stream": true`) gets a completion as
the server-sent chunks OpenAI sends: the text in word-sized pieces
(`pause` seconds apart), each tool call in pieces, the finish reason, the
usage last when `stream_options.include_usage` asks for it, then `[DONE]`;
`cut_after=N` drops the connection after N events.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count

import pytest

from tests.support.sse import pieces, write_events

PATHS = ("/v1/chat/completions", "/chat/completions")
_ids = count(1)


# --- answers ---------------------------------------------------------------------------


def tool_call(name: str, arguments, *, id: str | None = None) -> dict:
    """One tool call; `arguments` is a dict (sent as JSON) or the raw text to send."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": id or f"call_fake_{next(_ids)}",
        "type": "function",
        "function": {"name": name, "arguments": raw},
    }


def completion(
    text: str | None = None,
    *,
    tool_calls: list[dict] | None = None,
    usage: tuple[int, int] | tuple[int, int, int] | None = (100, 20),
    finish_reason: str | None = None,
    delay: float = 0,
    pause: float = 0,
    cut_after: int | None = None,
) -> dict:
    """A chat completion; `usage` is (prompt, completion[, cached]) or None for
    a server that reports none. `pause` and `cut_after`: when streamed."""
    message: dict = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict = {
        "id": f"chatcmpl-fake-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                "logprobs": None,
            }
        ],
    }
    if usage is not None:
        prompt, output, *cached = usage
        body["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
        }
        if cached:
            body["usage"]["prompt_tokens_details"] = {"cached_tokens": cached[0]}
    return {"status": 200, "body": body, "delay": delay, "pause": pause, "cut_after": cut_after}


def chunks(body: dict, *, include_usage: bool) -> list[tuple[None, dict | str]]:
    """A completion as the chunks of its stream (no event names), `[DONE]` last."""
    head = {k: body.get(k) for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    deltas: list[dict] = []
    finish = None
    for choice in body["choices"][:1]:
        message, finish = choice["message"], choice["finish_reason"]
        deltas.append({"role": "assistant"})
        text = message.get("content")
        deltas += [{"content": piece} for piece in pieces(text)] if text else []
        if text == "":
            deltas.append({"content": ""})
        for index, call in enumerate(message.get("tool_calls") or ()):
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            half = len(arguments) // 2
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": name, "arguments": arguments[:half]},
                        }
                    ]
                }
            )
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]})
    out = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    if deltas:
        out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if include_usage and (body.get("usage") or not deltas):
        out.append({**head, "choices": [], "usage": body.get("usage")})
    return [(None, chunk) for chunk in out] + [(None, "[DONE]")]


def compaction_answer(summary: str, memories: dict[str, str] | None = None, **kwargs) -> dict:
    """The compactor's JSON answer as the message content."""
    content = json.dumps(
        {"summary": summary, "memories": [{"name": n, "content": c} for n, c in (memories or {}).items()]}
    )
    return completion(content, **kwargs)


def error(
    status: int,
    message: str,
    *,
    type: str = "server_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict | None = None,
    delay: float = 0,
) -> dict:
    """An error status with an OpenAI-shaped body. By default it asks for a
    10 ms pause before a retry (`retry-after-ms`), so SDK retries are fast."""
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return {
        "status": status,
        "body": body,
        "headers": {"retry-after-ms": "10", **(headers or {})},
        "delay": delay,
    }


def raw(status: int, text: str, *, content_type: str = "text/plain", delay: float = 0) -> dict:
    """Any body at all, e.g. a proxy's HTML error page."""
    return {"status": status, "text": text, "content_type": content_type, "delay": delay}


# --- the server ------------------------------------------------------------------------


class FakeOpenAI:
    def __init__(self, *, keep_alive: bool = False):
        self.keep_alive = keep_alive  # HTTP/1.1, connections kept between answers
        self.connections = 0  # how many the clients opened
        self.requests: list[dict] = []  # {"path", "headers", "body"}, in arrival order
        self.answered: list[int] = []  # the status of each answer sent in full, in order
        # (request body, usage) of each completion sent in full: what a provider bills.
        self.billed: list[tuple[dict, dict]] = []
        # Answers by request instead of from the queue: body -> answer.
        self.answer_for = None
        self.answers: list[dict] = []
        self.fallback: dict | None = None
        self.released = threading.Event()  # set on stop: delayed answers end at once
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # what the test does

    def push(self, *answers: dict) -> "FakeOpenAI":
        with self._lock:
            self.answers.extend(answers)
        return self

    def always(self, answer: dict) -> "FakeOpenAI":
        with self._lock:
            self.fallback = answer
        return self

    @property
    def bodies(self) -> list[dict]:
        return [r["body"] for r in self.requests]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> "FakeOpenAI":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if fake.keep_alive else "HTTP/1.0"

            def setup(self):
                super().setup()
                with fake._lock:
                    fake.connections += 1

            def do_POST(self):
                fake._handle(self)

            def log_message(self, format, *args):  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        ).start()
        return self

    def release(self) -> None:
        """Send every delayed answer now, and any later one without its delay
        (a stream's pauses end too: it is cut)."""
        self.released.set()

    def stop(self) -> None:
        self.released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # what the server does

    def _next_answer(self, body) -> dict:
        if self.answer_for is not None:
            return self.answer_for(body)
        with self._lock:
            if self.answers:
                return self.answers.pop(0)
            if self.fallback is not None:
                return self.fallback
        return error(
            500, "The fake OpenAI server has no scripted answer left.", headers={"x-should-retry": "false"}
        )

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        payload = handler.rfile.read(length)
        try:
            body = json.loads(payload or b"null")
        except ValueError:
            body = payload.decode("utf-8", "replace")
        with self._lock:
            self.requests.append({"path": handler.path, "headers": dict(handler.headers), "body": body})
        if handler.path not in PATHS:
            answer = error(404, f"Unknown path {handler.path}.", type="invalid_request_error")
        else:
            answer = self._next_answer(body)
        if answer.get("delay"):
            self.released.wait(answer["delay"])
        if isinstance(body, dict) and body.get("stream") and answer["status"] == 200 and "body" in answer:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = chunks(answer["body"], include_usage=include_usage)
            if write_events(
                handler,
                events,
                pause=answer.get("pause", 0),
                stopping=self.released,
                cut_after=answer.get("cut_after"),
                keep_alive=self.keep_alive,
            ):
                with self._lock:
                    self.answered.append(200)
                    self.billed.append((body, answer["body"].get("usage")))
            return
        if "text" in answer:
            data, content_type = answer["text"].encode(), answer["content_type"]
        else:
            data, content_type = json.dumps(answer["body"]).encode(), "application/json"
        try:
            handler.send_response(answer["status"])
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(data)))
            for name, value in (answer.get("headers") or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout, a cancel)
            return
        with self._lock:
            self.answered.append(answer["status"])
            if answer["status"] == 200 and isinstance(answer.get("body"), dict):
                self.billed.append((body, answer["body"].get("usage")))


@pytest.fixture(name="fake_openai")
def fake_openai_fixture(settings, studio_conf):
    """A running fake, with the studio pointed at it: the key a test key,
    retries and timeout small. Stopped after the test."""
    fake = FakeOpenAI().start()
    settings.OPENAI_BASE_URL = fake.base_url
    settings.OPENAI_API_KEY = "test-key"
    studio_conf(MODEL_MAX_RETRIES=2, MODEL_TIMEOUT_SECONDS=10)
    yield fake
    fake.stop()
