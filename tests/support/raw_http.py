"""A server on loopback that answers each request with bytes the test
wrote, exactly as written: for what a real HTTP server library would not
send (a body in a content coding, a broken chunk, a connection closed while
idle, a proxy's view of a request), over TLS when asked."""

import gzip
import json
import socket
import threading

from tests.support.fake_openai import chunks, completion


def sse_body(text: str = "The chapel is cold.") -> bytes:
    """A streamed chat completion answering `text`, as server-sent events."""
    events = chunks(completion(text)["body"], include_usage=True)  # `[DONE]` last
    return b"".join(
        f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode() for _, data in events
    )


def chunked(body: bytes, piece: int = 40) -> bytes:
    parts = [body[i : i + piece] for i in range(0, len(body), piece)]
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def answer(body: bytes, *, encoding: str | None = None, sized: bool = False, version: str = "1.1") -> bytes:
    """An HTTP/1.1 (or `version`) answer carrying `body`: chunked, or with
    its Content-Length (`sized`), gzip-encoded when `encoding` says so."""
    head = [f"HTTP/{version} 200 OK", "Content-Type: text/event-stream; charset=utf-8"]
    if encoding:
        body = gzip.compress(body)
        head.append(f"Content-Encoding: {encoding}")
    if sized:
        head.append(f"Content-Length: {len(body)}")
    else:
        head.append("Transfer-Encoding: chunked")
        body = chunked(body)
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class RawServer:
    """Answers each request on a connection with the next of `answers`
    (bytes); with `close_after_answer`, closes the connection once it has
    answered and sets `closed`; with `one_per_connection`, reads no more on
    a connection that has answered (as an HTTP/1.0 server), holding it open
    until `stop`; with `before_body`, answers once the head has come and
    closes with the body unread. `request_lines`, `heads` and `connections`
    record what came."""

    def __init__(
        self, *answers: bytes, close_after_answer=False, one_per_connection=False, before_body=False, tls=None
    ):
        self.answers, self.tls = list(answers), tls  # tls: a server-side `ssl.SSLContext`
        self.close_after_answer, self.one_per_connection = close_after_answer, one_per_connection
        self.before_body = before_body  # answer on the head, close with the body unread
        self.heads: list[bytes] = []
        self.stopped = threading.Event()
        self.request_lines: list[str] = []
        self.connections = 0
        self.closed = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._serve, daemon=True, name="raw-http").start()

    @property
    def base_url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def stop(self) -> None:
        self.stopped.set()
        self._sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:  # the client refused the certificate
                conn.close()
                return
        with conn:
            buffer = b""
            while self.answers:
                while b"\r\n\r\n" not in buffer:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    buffer += piece
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                self.heads.append(head)
                if self.before_body:
                    self.request_lines.append(lines[0])
                    conn.sendall(self.answers.pop(0))
                    break
                length = next(
                    (
                        int(v)
                        for n, _, v in (h.partition(": ") for h in lines)
                        if n.lower() == "content-length"
                    ),
                    0,
                )
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                self.request_lines.append(lines[0])
                conn.sendall(self.answers.pop(0))
                if self.one_per_connection:
                    self.stopped.wait()
                    return
                if self.close_after_answer:
                    conn.shutdown(socket.SHUT_RDWR)
                    break
        self.closed.set()
