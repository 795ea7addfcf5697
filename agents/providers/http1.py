"""A model call's POST over HTTP/1.1 on connections of the studio's own.

The SDK sends a request through `httpx`, `httpcore` and `h11`: a request's
headers are normalised, validated and re-encoded by each layer, and each
piece of a streamed answer passes a state machine and four generators —
about 2,700 function calls, Python's and built-in, for one streamed call:
over a quarter of all a (b) message makes. Here the request is one
prepared header block and the body, sent in one write; the answer's head
is parsed once and its body read as it comes (chunked, sized or to the
close).

Only what a chat endpoint needs: `POST`, `http` or `https` (verified as
`httpx` verifies), no proxy, `Accept-Encoding: identity` (a gzip or
deflate answer is still read), connections kept while idle up to
`IDLE_SECONDS`. Failures are raised as `httpx`'s own errors
(`ConnectError`, `ReadTimeout`, `RemoteProtocolError`, …), so callers map
them as they map the SDK's. `sdk_route` decides when an SDK client's
calls may come here (no proxy configured, a plain base URL); the others
keep the SDK's stack.
"""

# Speed: the SDK's HTTP stack per streamed call; guarded by bench/agent_server.py (server CPU per message).
import functools
import re
import select
import socket
import threading
import time
import zlib
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx2

from .retries import RETRY_COUNT_HEADER

IDLE_SECONDS = 5.0  # as httpx keeps an idle connection
IDLE_MAX = 100  # idle connections kept per address
HEAD_MAX_BYTES = 64 * 1024  # an answer's status line and headers
CHUNK_LINE_MAX_BYTES = 1024  # a chunk's size line
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
READ_BYTES = 64 * 1024
# One line of a streamed answer's events: one event's JSON, a few KB; a
# server that sends its whole answer as one event stays far under this.
SSE_LINE_MAX_BYTES = 16 * 1024 * 1024


class Answer:
    """An answer whose head has been read: `status_code`, `headers` (names
    in lower case), and its body as it comes (`iter_bytes`). `close` keeps the
    connection for another call when the body was read to its end."""

    def __init__(self, connection: "_Connection", version: str, status: int, headers: dict, rest: bytes):
        self.status_code, self.headers = status, headers
        # Makes the request the errors raised while the body is read name, as
        # httpx names it: built only then (an httpx request is ~300 function calls).
        self.request_made: Callable[[], httpx2.Request] | None = None
        self._connection, self._rest, self._whole = connection, rest, False
        # HTTP/1.1 keeps the connection unless told not to; 1.0 only when told to.
        said = headers.get("connection", "").lower()
        self._keep = "keep-alive" in said if version == "HTTP/1.0" else "close" not in said

    def iter_bytes(self):
        """The body as it comes, decoded as `httpx` decodes it: gzip and
        deflate (zlib-wrapped or raw), each coding listed undone in turn;
        a coding it does not know is read as it is."""
        codings = [c.strip().lower() for c in self.headers.get("content-encoding", "").split(",")]
        decoders = [_Decoder(c) for c in reversed(codings) if c in ("gzip", "deflate")]
        pieces = self.raw_chunks()
        for decoder in decoders:
            pieces = decoder.decoded(pieces)
        try:
            yield from pieces
        except httpx2.RequestError as error:
            if self.request_made is not None and error._request is None:
                error.request = self.request_made()
            raise

    def raw_chunks(self):
        """The body as it comes, as the server sent it."""
        if self.status_code in (204, 304):  # no body, whatever the head says
            pass
        elif "chunked" in self.headers.get("transfer-encoding", "").lower():
            yield from self._chunked()
        elif "content-length" in self.headers:
            yield from self._sized(self._length())
        else:  # to the close: the connection ends with the answer
            self._keep = False
            if self._rest:
                yield self._rest
            while piece := self._connection.read(allow_end=True):
                yield piece
        self._whole = True

    def read(self) -> bytes:
        return b"".join(self.iter_bytes())

    def read_raw(self) -> bytes:
        return b"".join(self.raw_chunks())

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.release(keep=self._whole and self._keep)

    def _length(self) -> int:
        values = {part.strip() for part in self.headers["content-length"].split(",")}  # "N, N" is N
        value = values.pop() if len(values) == 1 else self.headers["content-length"]
        if not (value.isascii() and value.isdigit()):
            raise httpx2.RemoteProtocolError(f"the answer's Content-Length is not a number: {value[:40]!r}")
        return int(value)

    def _sized(self, left: int):
        if self._rest:
            piece, self._rest = self._rest[:left], b""
            left -= len(piece)
            yield piece
        while left > 0:
            piece = self._connection.read()
            if len(piece) > left:
                raise httpx2.RemoteProtocolError("the answer ran past its Content-Length")
            left -= len(piece)
            yield piece

    def _chunked(self):
        buffer, read = self._rest, self._connection.read
        self._rest = b""
        while True:
            while (end := buffer.find(b"\r\n")) < 0:
                if len(buffer) > CHUNK_LINE_MAX_BYTES:
                    raise httpx2.RemoteProtocolError("a chunk's size line is too long")
                buffer += read()
            size_text = buffer[:end].split(b";", 1)[0].strip()
            if not _CHUNK_SIZE.fullmatch(size_text):
                raise httpx2.RemoteProtocolError(f"a chunk's size is not a number: {size_text[:40]!r}")
            size = int(size_text, 16)
            buffer = buffer[end + 2 :]
            if size == 0:  # the last chunk; then trailers, up to an empty line
                while not (buffer.startswith(b"\r\n") or b"\r\n\r\n" in buffer):
                    if len(buffer) > HEAD_MAX_BYTES:
                        raise httpx2.RemoteProtocolError("the answer's trailers are too long")
                    buffer += read()
                return
            while size > 0:  # the chunk's data, handed on as it comes
                if not buffer:
                    buffer = read()
                piece, buffer = buffer[:size], buffer[size:]
                size -= len(piece)
                yield piece
            while len(buffer) < 2:
                buffer += read()
            if buffer[:2] != b"\r\n":
                raise httpx2.RemoteProtocolError("a chunk does not end where its size says")
            buffer = buffer[2:]


class _Decoder:
    """One content coding undone as its pieces come: gzip, or deflate with
    or without its zlib wrapping (servers send either)."""

    def __init__(self, coding: str):
        self.coding = coding
        self.zlib = zlib.decompressobj(zlib.MAX_WBITS | 16 if coding == "gzip" else zlib.MAX_WBITS)
        self.first = True

    def decoded(self, pieces):
        try:
            for piece in pieces:
                if out := self._decompress(piece):
                    yield out
            if out := self.zlib.flush():
                yield out
        except zlib.error as error:
            raise httpx2.DecodingError(f"the answer's {self.coding} could not be decoded: {error}") from error

    def _decompress(self, piece: bytes) -> bytes:
        if not self.first:
            return self.zlib.decompress(piece)
        self.first = False
        try:
            return self.zlib.decompress(piece)
        except zlib.error:
            if self.coding != "deflate":
                raise
            self.zlib = zlib.decompressobj(-zlib.MAX_WBITS)  # deflate without its zlib wrapping
            return self.zlib.decompress(piece)


class _Connection:
    def __init__(self, pool: "Pool", sock: socket.socket):
        self.pool, self.sock, self.idle_since = pool, sock, 0.0
        self.pending = b""  # what was read past an informational (1xx) answer

    def read(self, allow_end: bool = False) -> bytes:
        try:
            piece = self.sock.recv(READ_BYTES)
        except TimeoutError as error:
            raise httpx2.ReadTimeout(f"no answer within {self.sock.gettimeout():g} s") from error
        except OSError as error:
            raise httpx2.ReadError(str(error) or type(error).__name__) from error
        if not piece and not allow_end:
            raise httpx2.RemoteProtocolError("the server closed the connection before its answer ended")
        return piece

    def release(self, keep: bool) -> None:
        if keep:
            self.pool.keep(self)
        else:
            self.sock.close()

    def usable(self, now: float) -> bool:
        """Idle for less than IDLE_SECONDS, and nothing to read: a closed
        connection reads as ready (its end), so it is not used again."""
        if now - self.idle_since > IDLE_SECONDS:
            return False
        try:
            poller = select.poll()  # not select(): a busy process's descriptors pass 1024
            poller.register(self.sock, select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False


class Pool:
    """Connections to one `base_url`'s server, shared by threads: an idle
    one is taken (the most recently used first), or a new one opened."""

    def __init__(
        self, base_url: str, *, connect_timeout: float | None, read_timeout: float | None, tls_context
    ):
        parts = urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.address = (parts.hostname, parts.port or (443 if self.https else 80))
        self.prefix = parts.path.rstrip("/")
        self.host = parts.netloc
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.tls_context = tls_context
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def request_head(self, path: str, headers: dict) -> bytes:
        """A POST's head for `path` (under the base URL's path) with
        `headers`, up to its Content-Length, to be prepared once. ValueError
        for a header that cannot go on the wire as it is (a line break, a
        character past Latin-1)."""
        lines = [f"POST {self.prefix}{path} HTTP/1.1", f"Host: {self.host}", "Accept-Encoding: identity"]
        skip = {"host", "content-length", "accept-encoding", "transfer-encoding", "connection"}
        lines += [f"{name}: {value}" for name, value in headers.items() if name.lower() not in skip]
        if any("\r" in line or "\n" in line for line in lines):
            raise ValueError("a header holds a line break")
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    def post(self, head: bytes, body: bytes) -> Answer:
        """Send `head` (from `request_head`, with any further header lines)
        and `body`; the answer once its head has come."""
        connection = self._take()
        try:
            try:
                connection.sock.sendall(b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body))
            except TimeoutError as error:
                raise httpx2.WriteTimeout("the request could not be sent in time") from error
            except OSError as error:
                # As httpcore: a server may answer (413, 401) and close before it took the whole body.
                try:
                    version, status, headers, rest = self._head(connection)
                except httpx2.HTTPError:
                    raise httpx2.WriteError(str(error) or type(error).__name__) from error
                answer = Answer(connection, version, status, headers, rest)
                answer._keep = False
                return answer
            while True:
                version, status, headers, rest = self._head(connection)
                if status >= 200:
                    return Answer(connection, version, status, headers, rest)
                connection.pending = rest  # a 1xx: the real answer follows
        except BaseException:
            connection.sock.close()
            raise

    def keep(self, connection: _Connection) -> None:
        connection.idle_since = time.monotonic()
        with self._lock:
            if len(self._idle) < IDLE_MAX:
                self._idle.append(connection)
                return
        connection.sock.close()

    def _take(self) -> _Connection:
        now, expired = time.monotonic(), []
        with self._lock:  # the oldest first: those idle too long go
            while self._idle and now - self._idle[0].idle_since > IDLE_SECONDS:
                expired.append(self._idle.pop(0))
        for connection in expired:
            connection.sock.close()
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._open()
            if connection.usable(now):
                return connection
            connection.sock.close()

    def _open(self) -> _Connection:
        try:
            sock = socket.create_connection(self.address, timeout=self.connect_timeout)
        except TimeoutError as error:
            raise httpx2.ConnectTimeout(f"could not connect to {self.host} in time") from error
        except OSError as error:
            raise httpx2.ConnectError(str(error) or type(error).__name__) from error
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.https:
                sock = self.tls_context.wrap_socket(sock, server_hostname=self.address[0])
        except TimeoutError as error:
            sock.close()
            raise httpx2.ConnectTimeout(f"the TLS handshake with {self.host} timed out") from error
        except OSError as error:
            sock.close()
            raise httpx2.ConnectError(str(error) or type(error).__name__) from error
        sock.settimeout(self.read_timeout)
        return _Connection(self, sock)

    @staticmethod
    def _head(connection: _Connection) -> tuple[str, int, dict, bytes]:
        buffer, connection.pending = connection.pending, b""
        while (found := _HEAD_END.search(buffer)) is None:
            if len(buffer) > HEAD_MAX_BYTES:
                raise httpx2.RemoteProtocolError("the answer's head is too long")
            piece = connection.read(allow_end=True)
            if not piece:
                raise httpx2.RemoteProtocolError("the server closed the connection without an answer")
            buffer += piece
        status_line, *lines = (
            line.removesuffix("\r") for line in buffer[: found.start()].decode("latin-1").split("\n")
        )
        version, _, rest = status_line.partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not (code.isascii() and code.isdigit()):
            raise httpx2.RemoteProtocolError(f"not an HTTP/1.1 answer: {status_line[:80]!r}")
        headers: dict[str, str] = {}
        name = None
        for line in lines:
            if line[:1] in (" ", "\t") and name is not None:  # a folded line goes on the header before it
                headers[name] = f"{headers[name]} {line.strip()}".strip()
                continue
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise httpx2.RemoteProtocolError(f"a malformed header line: {line[:80]!r}")
            name, value = name.lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        return version, int(code), headers, buffer[found.end() :]


# --- server-sent events ------------------------------------------------------------------


def sse_events(chunks):
    """(event name or None, data or None) of each server-sent event in the
    byte `chunks`: its `event:` field and its `data:` lines joined, as
    UTF-8; other fields and comments are skipped (an event with neither is
    none). A line ends at LF, CRLF or a lone CR; an event ends at an empty
    line (or with the stream). A line longer than SSE_LINE_MAX_BYTES is a
    protocol error. Each byte is looked at a bounded number of times, however
    the server cuts the stream into chunks."""
    event: list = [None, []]  # the name, the data lines

    def ended(line: bytes):
        if not line:
            if event[0] is not None or event[1]:
                yield event[0], "\n".join(event[1]) if event[1] else None
            event[:] = [None, []]
        elif line.startswith(b"data:"):
            text = line.decode("utf-8", "replace")
            event[1].append(text[6:] if text.startswith("data: ") else text[5:])
        elif line.startswith(b"event:"):
            event[0] = line[6:].decode("utf-8", "replace").strip()

    # Holds no line end, but perhaps a CR as its last byte (half a CRLF, perhaps).
    pending = bytearray()
    for chunk in chunks:
        seen = max(len(pending) - 1, 0)
        pending += chunk
        # Lines end at the last LF, or at a CR that is not the last byte.
        cut = max(pending.rfind(b"\n", seen), pending.rfind(b"\r", seen, len(pending) - 1))
        if cut < 0:
            if len(pending) > SSE_LINE_MAX_BYTES:
                raise httpx2.RemoteProtocolError(
                    f"a line of the answer's events is longer than {SSE_LINE_MAX_BYTES} bytes"
                )
            continue
        done = bytes(pending[: cut + 1])
        del pending[: cut + 1]
        for line in _lines(done)[:-1]:
            yield from ended(line)
    for line in _lines(bytes(pending)) if pending else ():
        yield from ended(line)
    if event[0] is not None or event[1]:
        yield event[0], "\n".join(event[1]) if event[1] else None


def _lines(text: bytes) -> list[bytes]:
    return text.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")


# --- an SDK client's endpoint ----------------------------------------------------------------


class SdkRoute:
    """One endpoint of an SDK client made by Stainless (OpenAI's and
    Anthropic's are) on the studio's own connections: the client's address,
    headers and key read once; failures raised as that SDK's own errors
    (`sdk`: its module), as its own stack would raise them."""

    def __init__(self, client, sdk, url: str, pool: Pool, head: bytes):
        self.client, self.sdk, self.url, self.pool, self.head = client, sdk, url, pool, head

    def post(self, body: bytes, taken: int) -> Answer | None:
        """POST `body` (JSON) as the attempt after `taken` retries: the
        answer once its head has come, or None when the server redirects
        (the answer read and closed): the SDK's own stack follows redirects,
        so the caller hands it the call."""
        try:
            answer = self.pool.post(self.head + b"%s: %d\r\n" % (RETRY_COUNT_HEADER.encode(), taken), body)
        except httpx2.TimeoutException as error:
            raise self.sdk.APITimeoutError(request=self.request(taken)) from error
        except httpx2.RequestError as error:
            raise self.sdk.APIConnectionError(request=self.request(taken)) from error
        if answer.status_code >= 400:
            raise self.client._make_status_error_from_response(self.response(answer, taken, whole=True))
        if 300 <= answer.status_code < 400 and "location" in answer.headers:
            self.response(answer, taken, whole=True)
            return None
        if not 200 <= answer.status_code < 300:  # a redirect to nowhere: httpx raised it so
            raise self.client._make_status_error_from_response(self.response(answer, taken, whole=True))
        answer.request_made = functools.partial(self.request, taken)
        return answer

    def request(self, taken: int):
        """The request the SDK's errors name: the address and the retry count."""
        return httpx2.Request("POST", self.url, headers={RETRY_COUNT_HEADER: str(taken)})

    def response(self, answer: Answer, taken: int, *, whole: bool = False):
        """`answer` as the `httpx` response the SDK's errors are made from:
        with its body (`whole`: read, and the answer closed) or its head only."""
        body = b""
        if whole:
            try:
                body = answer.read_raw()
            finally:
                answer.close()
        return httpx2.Response(
            answer.status_code,
            headers=list(answer.headers.items()),
            content=body,
            request=self.request(taken),
        )


def sdk_headers(client) -> dict:
    """The headers every request of `client` carries, its key's among them,
    as the SDK sends them (names in lower case)."""
    headers = {**client.default_headers, **client.auth_headers}
    return {name.lower(): value for name, value in headers.items() if isinstance(value, str)}


@functools.lru_cache(maxsize=32)
def sdk_route(client, path: str, sdk) -> SdkRoute | None:
    """`client`'s endpoint at `path` (under its base URL) on the studio's
    own connections, or None where its calls keep the SDK's HTTP stack: a
    proxy for its address, a base URL with a query or credentials, a
    header these connections would not send as it is."""
    http, base = client._client, str(client.base_url)
    parts = urlsplit(base)
    if (
        # A proxy for this address (NO_PROXY alone mounts none for it).
        http._transport_for_url(httpx2.URL(base)) is not http._transport
        or parts.scheme not in ("http", "https")
        or parts.query
        or parts.username
        or not parts.hostname
    ):
        return None
    tls = httpx2.create_ssl_context(trust_env=http._trust_env) if parts.scheme == "https" else None
    timeout = http.timeout
    pool = Pool(base, connect_timeout=timeout.connect, read_timeout=timeout.read, tls_context=tls)
    try:
        head = pool.request_head(path, sdk_headers(client))
    except ValueError:  # the SDK's stack says what is wrong with the header
        return None
    return SdkRoute(client, sdk, base.rstrip("/") + path, pool, head)
