"""A loopback OpenAI-compatible model that says what a steered model can:
the players of a game tell it what to do, and it does it.

Run in a process of its own (`HostileModel` starts it and reads its
figures), so its work — reading megabyte requests, writing megabyte
answers — shares no GIL with the test or the studio. It prints `PORT <n>`
once it listens.

What it answers is decided by the request alone. A model step (the studio
always asks to stream) reads the player's newest message for a tag
`[attack: <name>]` (none: a plain reply) and answers:

- `setup`: `close_memory` of `lore` (a couple of kilobytes) and
  `open_memory` of it in one step, then words;
- `open-flood`: hundreds of `open_memory` calls of `lore` in one step, and
  again at every step after (a steered model does not stop);
- `close-flood`: hundreds of `close_memory` calls of new names in one step,
  and again at every step after;
- `deep-arguments`: one call whose arguments nest 2,000 deep, at every step;
- `huge-arguments`: `close_memory` whose arguments are just under the
  studio's bound (`--argument-bound`), then words;
- `oversize-arguments`: the same, just over it, then words;
- `broken-stream`: some words, the usage, then a chunk that is not JSON;
- `no-choices`: a whole 200 completion (not streamed) with no choices.

A step that offers no tools (the studio's last call of a turn that must
stop) gets words — after the floods, with the flood's calls again beside
them. A compaction (not streamed, a `response_format`) of a hostile
agent's gets, in turn: an answer nested 2,000 deep, a summary, one that
is not JSON, a summary; any other agent's, a summary.

What it bills is what it reports in `usage`, on every answer that carries
one (all of them here): prompt tokens a token per five bytes of the
messages and tools (a little under what the studio counts, so the holds it
makes from its own counts are never outrun by the fake's counting), and
completion tokens a token per five bytes written, at most the
`max_completion_tokens` asked for — as a provider stops there. A request
is the hostile game's when the marker (`--marker`) is anywhere in it.

`GET /stats` answers, per game, the calls it billed and their prompt and
completion tokens, the bytes it wrote, and how many of each kind it
answered; `unsent` counts answers whose client left before the usage
was written (none is billed).
"""

import argparse
import json
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from pathlib import Path

ATTACK = re.compile(r"\[attack: ([\w-]+)\]")
FLOOD = 300  # tool calls in one step
DEEP = 2_000  # levels of nesting
LORE = "The chapel bells ring under the marsh water at every new moon. " * 32
PIECE_BYTES = 64 * 1024  # a long value streams in pieces of this size
# Attacks made on the first step of a turn only (then words).
ONCE = ("setup", "huge-arguments", "oversize-arguments")
WORDS = ["bells", "water", "ferryman", "marsh", "chapel", "lantern", "salt", "reed", "ghost", "tide"]
_ids = count(1)


def tokens(text: str) -> int:
    return (len(text) + 4) // 5 if text else 0


def prompt_tokens(body: dict) -> int:
    total = tokens(json.dumps(body["tools"])) if body.get("tools") else 0
    for message in body.get("messages") or ():
        content = message.get("content")
        total += tokens(content if isinstance(content, str) else json.dumps(content or ""))
        for call in message.get("tool_calls") or ():
            total += tokens(call["function"]["name"]) + tokens(call["function"]["arguments"])
    return total


def words(size: int, seed: int) -> str:
    """About `size` characters of words, in an order no compressor folds away."""
    rng = random.Random(seed)
    out, length = [], 0
    while length < size:
        word = rng.choice(WORDS) + rng.choice(" ,.;") + " "
        out.append(word)
        length += len(word)
    return "".join(out)[:size]


def deep_json(levels: int = DEEP) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def call(name: str, arguments) -> dict:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_h{next(_ids)}", "name": name, "arguments": text}


class Model:
    """What the model says, and what it has billed."""

    def __init__(self, marker: str, argument_bound: int):
        self.marker, self.argument_bound = marker, argument_bound
        self.lock = threading.Lock()
        self.compactions = 0
        self.names = count(1)
        self.billed: dict[str, Counter] = {}
        self.kinds: Counter = Counter()
        self.unsent = 0
        self._huge: dict[int, str] = {}

    # --- what it says ---------------------------------------------------------------

    def step(self, body: dict) -> tuple[str, str, list[dict]]:
        """(the attack, the words, the tool calls) of one model step."""
        messages = body.get("messages") or []
        player = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        asked = ATTACK.search(player) if isinstance(player, str) else None
        attack = asked[1] if asked else "plain"
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        first = not any(m.get("role") == "tool" for m in messages[users[-1] if users else 0 :])
        if not body.get("tools"):  # the last call of a turn that must stop: words (and calls, regardless)
            calls = self.calls(attack) if attack in ("open-flood", "close-flood") else []
            return attack, "I have said all I will for now.", calls
        if attack == "broken-stream":
            return attack, "The ferryman starts to", []
        if attack in ("open-flood", "close-flood", "deep-arguments") or (first and attack in ONCE):
            return attack, "", self.calls(attack)
        return attack, "The ferryman nods and the story goes on.", []

    def calls(self, attack: str) -> list[dict]:
        if attack == "setup":
            lore = {"name": "lore", "description": "What the marsh folk tell.", "content": LORE}
            return [call("close_memory", lore), call("open_memory", {"name": "lore"})]
        if attack == "open-flood":
            return [call("open_memory", {"name": "lore"}) for _ in range(FLOOD)]
        if attack == "close-flood":
            with self.lock:
                names = [next(self.names) for _ in range(FLOOD)]
            note = "A note the player asked for."
            return [
                call("close_memory", {"name": f"n{n}", "description": note, "content": note}) for n in names
            ]
        if attack == "deep-arguments":
            return [call("close_memory", deep_json())]
        if attack in ("huge-arguments", "oversize-arguments"):
            size = (
                self.argument_bound - 1024 if attack == "huge-arguments" else self.argument_bound + 64 * 1024
            )
            return [call("close_memory", self.huge(size))]
        return []

    def huge(self, size: int) -> str:
        with self.lock:
            if size not in self._huge:
                arguments = {"name": "tome", "description": "A heavy book.", "content": ""}
                room = size - len(json.dumps(arguments))
                self._huge[size] = json.dumps({**arguments, "content": words(room, size)})
            return self._huge[size]

    def compaction(self, hostile: bool) -> tuple[str, str]:
        """(its kind, the content) of a compactor's answer."""
        summary = json.dumps({"summary": "The players tried everything; the story held.", "memories": []})
        if not hostile:
            return "summary", summary
        with self.lock:
            turn = self.compactions
            self.compactions += 1
        answers = [
            ("deep", deep_json()),
            ("summary", summary),
            ("not-json", "{the summary: and on"),
            ("summary", summary),
        ]
        return answers[turn % len(answers)]

    # --- what it bills ----------------------------------------------------------------

    def bill(self, game: str, kind: str, usage: dict, written: int) -> None:
        with self.lock:
            billed = self.billed.setdefault(game, Counter())
            billed["calls"] += 1
            billed["prompt_tokens"] += usage["prompt_tokens"]
            billed["completion_tokens"] += usage["completion_tokens"]
            billed["bytes_written"] += written
            self.kinds[f"{game} {kind}"] += 1

    def stats(self) -> dict:
        with self.lock:
            return {"billed": self.billed, "kinds": self.kinds, "unsent": self.unsent}


def usage_of(body: dict, written: str) -> dict:
    prompt = prompt_tokens(body)
    most = body.get("max_completion_tokens") or body.get("max_tokens") or 4096
    completion = min(tokens(written), most)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion(message: dict, usage: dict, finish: str) -> dict:
    choices = [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}]
    return {
        "id": f"chatcmpl-h{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "hostile",
        "choices": choices,
        "usage": usage,
    }


def stream_chunks(text: str, calls: list[dict], usage: dict, *, broken: bool = False) -> list[str]:
    """The data of each event of a streamed answer, `[DONE]` last."""
    head = {"id": f"chatcmpl-h{next(_ids)}", "object": "chat.completion.chunk", "created": int(time.time())}
    head["model"] = "hostile"

    def chunk(delta: dict, finish=None) -> str:
        return json.dumps({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant"})]
    out += [chunk({"content": word}) for word in re.findall(r"\S+\s*", text)]
    for index, each in enumerate(calls):
        arguments = each["arguments"]
        pieces = [arguments[i : i + PIECE_BYTES] for i in range(0, len(arguments), PIECE_BYTES)] or [""]
        function = {"name": each["name"], "arguments": pieces[0]}
        out.append(
            chunk(
                {"tool_calls": [{"index": index, "id": each["id"], "type": "function", "function": function}]}
            )
        )
        out += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces[1:]]
    usage_chunk = json.dumps({**head, "choices": [], "usage": usage})
    if broken:  # the usage, then something that is not JSON: the stream cannot be read on
        return [*out, usage_chunk, '{"choices": [{"delta": {"content": "and then']
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    return [*out, usage_chunk, "[DONE]"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real providers
    disable_nagle_algorithm = True
    model: Model  # set on the class by `serve`

    def do_POST(self):  # noqa: N802 — http.server's naming
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        body = json.loads(raw)
        game = "hostile" if self.model.marker in raw else "quiet"
        if body.get("stream"):
            self.step(body, game)
        else:
            self.compaction(body, game)

    def step(self, body: dict, game: str) -> None:
        attack, text, calls = self.model.step(body)
        written = text + "".join(c["name"] + c["arguments"] for c in calls)
        usage = usage_of(body, written)
        if attack == "no-choices" and body.get("tools"):
            answer = completion({"content": None}, usage, "stop")
            answer["choices"] = []
            return self.whole(json.dumps(answer), game, attack, usage)
        events = stream_chunks(
            text, calls, usage, broken=attack == "broken-stream" and bool(body.get("tools"))
        )
        payload = "".join(f"data: {data}\n\n" for data in events).encode()
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        self.send_all(head.encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload), game, attack, usage)

    def compaction(self, body: dict, game: str) -> None:
        kind, content = self.model.compaction(game == "hostile")
        usage = usage_of(body, content)
        self.whole(
            json.dumps(completion({"content": content}, usage, "stop")), game, f"compaction {kind}", usage
        )

    def whole(self, text: str, game: str, kind: str, usage: dict) -> None:
        data = text.encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        self.send_all(head.encode() + data, game, kind, usage)

    def send_all(self, data: bytes, game: str, kind: str, usage: dict) -> None:
        """One write (no Nagle stall between pieces); billed once it is out."""
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with self.model.lock:
                self.model.unsent += 1
            return
        self.model.bill(game, kind, usage, len(data))

    def do_GET(self):  # noqa: N802
        data = json.dumps(self.model.stats()).encode()
        self.wfile.write(
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )

    def log_message(self, format, *args):  # quiet
        pass


class Server(ThreadingHTTPServer):
    daemon_threads, request_queue_size = True, 256

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # not a client that dropped its connection
            super().handle_error(request, client_address)


def serve(marker: str, argument_bound: int) -> None:
    Handler.model = Model(marker, argument_bound)
    server = Server(("127.0.0.1", 0), Handler)
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.5)


class HostileModel:
    """The model in a process of its own: `base_url` for OPENAI_BASE_URL,
    `stats()` for what it billed."""

    def __init__(self, *, marker: str, argument_bound: int):
        script = Path(__file__).resolve()
        command = [sys.executable, str(script), "--marker", marker, "--argument-bound", str(argument_bound)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.process.kill()
            raise RuntimeError(f"the hostile model did not start: {line!r}")
        self.port = int(line.split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--marker", required=True)
    parser.add_argument("--argument-bound", type=int, required=True)
    options = parser.parse_args()
    serve(options.marker, options.argument_bound)
