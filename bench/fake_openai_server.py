"""The loopback OpenAI chat-completions server of (b): stdlib only, a
thread per connection, keep-alive, no latency; prints `PORT <n>` once it
listens. A request whose last message is a tool result, or that offers no
tools, gets a text reply; any other one tool call: `open_memory
{"name": "notes"}`, or what the newest user message asks for on a line
`@call <tool> <json arguments>`; a compaction request a summary. Usage is
request bytes / 4 prompt tokens and 20 completion tokens; `GET /stats`
answers the requests it has had.
"""

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count

CALL_LINE = re.compile(r"^@call\s+(\w+)\s+(\{.*\})\s*$", re.M)
_ids = count(1)
_stats = {"requests": 0}
_lock = threading.Lock()


def answer(body: dict, size: int) -> dict:
    """The completion for one request body."""
    messages = body.get("messages") or [{}]
    if body.get("response_format"):
        message = {"content": json.dumps({"summary": "The story so far, in brief (bench).", "memories": []})}
    elif messages[-1].get("role") == "tool" or not body.get("tools"):
        message = {"content": "The keeper nods and the story goes on."}
    else:
        asked = CALL_LINE.search(next(m["content"] for m in reversed(messages) if m["role"] == "user"))
        name, arguments = (asked[1], json.loads(asked[2])) if asked else ("open_memory", {"name": "notes"})
        function = {"name": name, "arguments": json.dumps(arguments)}
        message = {
            "content": None,
            "tool_calls": [{"id": f"call_bench_{next(_ids)}", "type": "function", "function": function}],
        }
    tokens = max(1, size // 4)
    return {
        "id": f"chatcmpl-bench-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 20, "total_tokens": tokens + 20},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True

    def do_POST(self):  # noqa: N802 — http.server's naming
        with _lock:
            _stats["requests"] += 1
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            if self.path != "/v1/chat/completions":
                raise LookupError(self.path)
            self._write(200, answer(json.loads(raw), len(raw)))
        except Exception as error:  # noqa: BLE001 — answered, OpenAI-shaped
            message = {"error": {"message": f"bench fake: {error!r}", "type": "server_error"}}
            self._write(404 if isinstance(error, LookupError) else 500, message)

    def do_GET(self):  # noqa: N802
        with _lock:
            self._write(200, dict(_stats))

    def _write(self, status: int, data: dict) -> None:
        payload = json.dumps(data).encode()
        head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\nContent-Type: application/json\r\n"
        # One write: no Nagle / delayed-ACK stall.
        self.wfile.write(f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload)

    def log_message(self, format, *args):  # quiet
        pass


class Server(ThreadingHTTPServer):
    daemon_threads, request_queue_size = True, 256  # the concurrent phase's connections, at once


if __name__ == "__main__":
    server = Server(("127.0.0.1", 0), Handler)
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.5)
