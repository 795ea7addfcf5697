"""A fast OpenAI-compatible chat-completions server on loopback, for the
server benchmarks (stdlib only; one thread per connection, HTTP/1.1
keep-alive, no latency unless asked).

    .venv/bin/python bench/fake_openai_server.py [--port 0] [--latency-ms 0]

It prints `PORT <n>` on its first line of stdout once it listens.

What it answers (the wire format of tests/providers/fake_openai.py):

- a chat request whose last message is a tool result: a text reply;
- any other chat request that offers tools: one tool call — by default
  `open_memory {"name": "notes"}`, or what the newest user message asks for
  on a line `@call <tool> <json arguments>`;
- a chat request without tools (a transient send, memory off): a text reply;
- a compaction request (it asks for `response_format`): a JSON summary that
  rewrites no memory.

Usage is reported as (request bytes / 4) prompt tokens and 20 completion
tokens. `GET /stats` answers the counts of what it answered.
"""

import argparse
import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count

CALL_LINE = re.compile(r"^@call\s+(\w+)\s+(\{.*\})\s*$", re.M)
DEFAULT_CALL = ("open_memory", {"name": "notes"})

_ids = count(1)
_stats = {"requests": 0, "toolCalls": 0, "replies": 0, "compactions": 0, "errors": 0}
_stats_lock = threading.Lock()


def _bump(key: str) -> None:
    with _stats_lock:
        _stats[key] += 1


def _completion(message: dict, prompt_tokens: int, finish_reason: str) -> dict:
    return {
        "id": f"chatcmpl-bench-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "bench",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 20,
            "total_tokens": prompt_tokens + 20,
        },
    }


def _newest_user_text(messages: list[dict]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
            return content or ""
    return ""


def answer(body: dict, size: int) -> dict:
    """The completion for one request body."""
    prompt_tokens = max(1, size // 4)
    messages = body.get("messages") or []
    if body.get("response_format"):
        _bump("compactions")
        content = json.dumps({"summary": "The story so far, in brief (bench).", "memories": []})
        return _completion({"role": "assistant", "content": content}, prompt_tokens, "stop")
    last = messages[-1] if messages else {}
    if last.get("role") == "tool" or not body.get("tools"):
        _bump("replies")
        text = "The keeper nods and the story goes on."
        return _completion({"role": "assistant", "content": text}, prompt_tokens, "stop")
    name, arguments = DEFAULT_CALL
    asked = CALL_LINE.search(_newest_user_text(messages))
    if asked:
        name, arguments = asked.group(1), json.loads(asked.group(2))
    _bump("toolCalls")
    call = {
        "id": f"call_bench_{next(_ids)}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return _completion(
        {"role": "assistant", "content": None, "tool_calls": [call]}, prompt_tokens, "tool_calls"
    )


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True
    latency = 0.0

    def do_POST(self):  # noqa: N802 — http.server's naming
        _bump("requests")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            if self.path not in ("/v1/chat/completions", "/chat/completions"):
                raise LookupError(self.path)
            result, status = answer(json.loads(raw), len(raw)), 200
        except Exception as error:  # noqa: BLE001 — answer it, OpenAI-shaped
            _bump("errors")
            result = {"error": {"message": f"bench fake: {error!r}", "type": "server_error"}}
            status = 404 if isinstance(error, LookupError) else 500
        if self.latency:
            time.sleep(self.latency)
        self._write(status, result)

    def do_GET(self):  # noqa: N802
        with _stats_lock:
            self._write(200, dict(_stats))

    def _write(self, status: int, data: dict) -> None:
        payload = json.dumps(data).encode()
        head = (
            f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode()
        try:
            self.wfile.write(head + payload)  # one write: no Nagle/delayed-ACK stall
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def log_message(self, format, *args):  # quiet
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0)
    args = parser.parse_args()
    Handler.latency = args.latency_ms / 1000
    server = Server(("127.0.0.1", args.port), Handler)
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
