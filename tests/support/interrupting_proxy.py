"""An HTTP proxy on loopback in front of a studio that can end a turn's
event stream the way the studio does when it can learn nothing more of the
turn (its Redis and its database both away): with the studio's own
`stream_interrupted` event (agents/sending/sse.py). Deterministic, where
stopping a private Redis and PostgreSQL under a live stream is not.

    with InterruptingProxy(web.url) as proxy:
        proxy.interrupt(which=streamed_send, after="reply.delta")
        io = connect(proxy.url, key)  # its next streamed send is interrupted after its first piece

Every other request, and every stream once its interruptions are spent, is
passed on as the studio answers it. `requests` records each answer as
(method, path, status). WebSockets are not passed on."""

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import httpx

from agents.sending import sse


# Which answers to interrupt, by (method, path).
def streamed_send(method: str, path: str) -> bool:
    return method == "POST" and path.endswith("/messages")


def turn_events(method: str, path: str) -> bool:
    return method == "GET" and path.endswith("/events")


# What is not passed on from one side to the other: the hop's own headers.
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}


class InterruptingProxy:
    def __init__(self, url: str):
        self.target = url.rstrip("/")
        self.upstream = httpx.Client(base_url=self.target, timeout=httpx.Timeout(30, read=None))
        self.requests: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()
        self.rule: tuple[Callable[[str, str], bool], str | None, int] | None = None
        self.interrupted = 0  # streams ended here so far
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def interrupt(self, *, which: Callable[[str, str], bool], after: str | None, times: int = 1) -> None:
        """End the next `times` event streams that `which(method, path)`
        picks with `stream_interrupted`: after passing on the studio's
        events up to the first of type `after` (None: passing on none), once
        the turn's id has come."""
        with self.lock:
            self.rule = (which, after, times)

    def _takes(self, method: str, path: str) -> str | None | bool:
        """The `after` of the rule that interrupts this answer; False: none does."""
        with self.lock:
            if self.rule is None or self.rule[2] <= 0 or not self.rule[0](method, path):
                return False
            which, after, times = self.rule
            self.rule = (which, after, times - 1)
            return after

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.server.shutdown()
        self.server.server_close()
        self.upstream.close()


def _handler(proxy: InterruptingProxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass  # the studio's own log has each request

        def do_GET(self):
            self._pass_on()

        do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        def _pass_on(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            request = proxy.upstream.build_request(self.command, self.path, headers=headers, content=body)
            response = proxy.upstream.send(request, stream=True)
            path = urlsplit(self.path).path
            with proxy.lock:
                proxy.requests.append((self.command, path, response.status_code))
            try:
                self.send_response(response.status_code)
                for name, value in response.headers.multi_items():
                    if name.lower() not in HOP_HEADERS:
                        self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                streamed = response.headers.get("content-type", "").startswith("text/event-stream")
                after = proxy._takes(self.command, path) if streamed else False
                if after is False:
                    for chunk in response.iter_raw():
                        self._chunk(chunk)
                else:
                    self._interrupted(response, path, after)
                self._chunk(b"")  # the answer's end
            finally:
                response.close()

        def _interrupted(self, response: httpx.Response, path: str, after: str | None) -> None:
            """The studio's events up to the first `after` (none for None),
            then its `stream_interrupted` for the turn; the studio's stream is dropped."""
            agent = unquote(path.split("/")[4])
            buffer, turn_id = b"", None
            for chunk in response.iter_raw():
                buffer += chunk
                while b"\n\n" in buffer:
                    text, buffer = buffer.split(b"\n\n", 1)
                    fields = dict(line.split(": ", 1) for line in text.decode().split("\n") if ": " in line)
                    if "data" in fields:
                        turn_id = turn_id or json.loads(fields["data"]).get("turnId")
                    if after is not None:
                        self._chunk(text + b"\n\n")
                    if turn_id and (after is None or fields.get("event") == after):
                        self._chunk(sse.sse_encode(sse.stream_interrupted(agent, turn_id)))
                        with proxy.lock:
                            proxy.interrupted += 1
                        return

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    return Handler
