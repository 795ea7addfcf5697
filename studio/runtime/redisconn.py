"""One Redis client per process (its connection pool is shared by every
thread), for what the studio keeps in Redis itself: the send-rate windows,
the event buffers, the wake-ups between processes. The three commands every
send makes (a send-rate window's script, an event's script, a wake-up's
PUBLISH) go through `LeanRedis` instead. The channel layer and Celery keep
their own connections."""

import hashlib
import os
import threading
from contextlib import suppress

from django.conf import settings

_lock = threading.Lock()
_clients: dict = {}


def redis_client(*, blocking: bool = False):
    """The process's client for REDIS_URL. `blocking`: a second client with
    no read time-out, for a connection that waits on pub/sub."""
    with _lock:
        client = _clients.get(blocking)
        if client is None:
            import redis

            client = redis.Redis.from_url(
                settings.REDIS_URL,
                socket_connect_timeout=1,
                socket_timeout=None if blocking else 1,
                health_check_interval=30 if blocking else 0,
            )
            _clients[blocking] = client
        return client


# --- the commands every send makes ----------------------------------------------------


def lean_client() -> "LeanRedis":
    """The process's lean client for REDIS_URL (below)."""
    with _lock:
        client = _clients.get("lean")
        if client is None:
            client = _clients["lean"] = LeanRedis(settings.REDIS_URL)
        return client


class LeanRedis:
    """Connections to Redis for the few commands every send makes (the send
    rate's window, its events' buffer, its wake-up): each command written
    to the socket in one piece and its answer read straight from it, where
    redis-py builds, retries and parses each through several layers (~180
    µs of this process's CPU a command against ~60). Connections are made
    (address, TLS, password, database) by redis-py's own connection class
    for the URL; redis-py keeps every other command.

    Answers come back as redis-py's connection reads them, before its
    client's conversions for a command (PING's True): bulk strings as bytes,
    integers as int, arrays as lists; an error answer is
    raised as redis-py's `ResponseError` (`NoScriptError` for NOSCRIPT) and
    leaves the connection in use. A connection that fails otherwise is
    closed; a command that failed on a kept connection before any answer
    came is sent once more on a new one, as redis-py retries it (most often
    a Redis restarted since closed that one, and the command never ran)."""

    # Speed: redis-py's layers per hot command; guarded by bench/agent_server.py (server CPU per message).
    def __init__(self, url: str, *, timeout: float = 1.0, idle_most: int = 16):
        import redis

        self.pool = redis.ConnectionPool.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.idle_most = idle_most
        self.idle: list[_LeanConnection] = []
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def call(self, *parts):
        """Send one command (its name and arguments) and return its answer."""
        payload = _packed(parts)
        connection, kept = self._take()
        try:
            try:
                answer = self._exchange(connection, payload)
            except _Unanswered:
                if not kept:
                    raise
                answer = self._exchange(self._new(), payload)
        except _Unanswered as error:
            import redis

            raise redis.ConnectionError(f"Redis closed the connection: {error}") from error
        if isinstance(answer, Exception):
            raise answer
        return answer

    def _exchange(self, connection: "_LeanConnection", payload: bytes):
        """The answer to `payload` on `connection`, which is kept for the next
        command, or closed when anything but an error answer went wrong."""
        try:
            answer = connection.exchange(payload)
        except BaseException:
            connection.close()
            raise
        self._give_back(connection)
        return answer

    def script(self, source: str) -> "LeanScript":
        return LeanScript(self, source)

    def _take(self) -> "tuple[_LeanConnection, bool]":
        with self.lock:
            if self.pid != os.getpid():  # forked: the parent's sockets are not this process's
                self.idle, self.pid = [], os.getpid()
            if self.idle:
                return self.idle.pop(), True
        return self._new(), False

    def _new(self) -> "_LeanConnection":
        import redis

        made = self.pool.make_connection()
        try:
            made.connect()
        except redis.RedisError:
            made.disconnect()
            raise
        return _LeanConnection(made)

    def _give_back(self, connection: "_LeanConnection") -> None:
        with self.lock:
            if len(self.idle) < self.idle_most and self.pid == os.getpid():
                self.idle.append(connection)
                return
        connection.close()


class LeanScript:
    """A Lua script run by its digest (EVALSHA), loaded on the server with
    EVAL the first time Redis does not know it."""

    def __init__(self, client: LeanRedis, source: str):
        self.client, self.source = client, source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __call__(self, keys: list, args: list):
        import redis

        try:
            return self.client.call("EVALSHA", self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return self.client.call("EVAL", self.source, len(keys), *keys, *args)


class _Unanswered(Exception):
    """The connection failed before any of the answer came."""


class _LeanConnection:
    def __init__(self, made):
        self.made, self.sock = made, made._sock
        self.buffer = bytearray()
        self.at = 0

    def exchange(self, payload: bytes):
        import redis

        answered = False
        try:
            self.sock.sendall(payload)
            if self.at == len(self.buffer):
                self._more()
            answered = True
            return self._answer()
        except (ConnectionResetError, BrokenPipeError, _Closed) as error:
            if not answered:
                raise _Unanswered(str(error)) from error
            raise redis.ConnectionError(f"Redis closed the connection: {error}") from error
        except TimeoutError as error:
            raise redis.TimeoutError(f"Redis did not answer in time: {error}") from error
        except OSError as error:
            raise redis.ConnectionError(f"Redis could not be reached: {error}") from error

    def close(self) -> None:
        with suppress(Exception):
            self.made.disconnect()

    def _more(self) -> None:
        if self.at:
            del self.buffer[: self.at]
            self.at = 0
        piece = self.sock.recv(65536)
        if not piece:
            raise _Closed("end of stream")
        self.buffer += piece

    def _line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n", self.at)) < 0:
            self._more()
        line = bytes(self.buffer[self.at : end])
        self.at = end + 2
        return line

    def _answer(self):
        import redis

        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            while len(self.buffer) - self.at < size + 2:
                self._more()
            value = bytes(self.buffer[self.at : self.at + size])
            self.at += size + 2
            return value
        if kind == b":":
            return int(rest)
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self._answer() for _ in range(size)]
        if kind == b"+":
            return rest
        if kind == b"-":
            text = rest.decode(errors="replace")
            kind = redis.exceptions.NoScriptError if text.startswith("NOSCRIPT") else redis.ResponseError
            return kind(text)
        if kind == b"_":
            return None
        if kind == b"#":
            return rest == b"t"
        if kind == b",":
            return float(rest)
        if kind == b"%":
            return {self._answer(): self._answer() for _ in range(int(rest))}
        raise redis.ConnectionError(f"an answer Redis does not give: {line[:40]!r}")


class _Closed(OSError):
    pass


def _packed(parts) -> bytes:
    """A command as RESP: an array of bulk strings, each argument encoded as
    redis-py encodes it."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        if isinstance(part, str):
            part = part.encode()
        elif isinstance(part, bool):
            raise TypeError("a bool is not a Redis argument: send 0 or 1")
        elif isinstance(part, int):
            part = b"%d" % part
        elif isinstance(part, float):
            part = repr(part).encode()
        elif not isinstance(part, bytes):
            raise TypeError(f"a {type(part).__name__} is not a Redis argument")
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)
