"""A request body over STUDIO_MAX_BODY_BYTES is refused before it is read
whole: on its Content-Length at once, and without one (chunked) as soon as
what arrived passes the limit — by the ASGI application, and by a real
Daphne server, which would otherwise take the whole body in first."""

import asyncio
import json
import socket
import time

import pytest
from django.conf import settings

from studio.asgi import application
from tests.support.web import start_web, stop_web

LIMIT = 65_536
CHUNK = 16_384


class Client:
    """Drives the ASGI application as a server would, counting the body
    bytes the application asked for."""

    def __init__(self, chunks, *, length: int | None = None, path="/api/v1/agents/dm/messages"):
        headers = [(b"host", b"localhost"), (b"content-type", b"application/json")]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        self.scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("localhost", 80),
        }
        self.chunks, self.read, self.sent = list(chunks), 0, []

    async def receive(self):
        if not self.chunks:  # the client sent it all: it waits for the answer
            await asyncio.sleep(30)
            return {"type": "http.disconnect"}
        chunk = self.chunks.pop(0)
        self.read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}

    async def send(self, message):
        self.sent.append(message)

    async def answer(self, timeout=10):
        await asyncio.wait_for(application(self.scope, self.receive, self.send), timeout)
        start, body = self.sent[0], b"".join(m.get("body", b"") for m in self.sent[1:])
        headers = {name.decode().lower(): value.decode() for name, value in start["headers"]}
        return start["status"], headers, body


def four_times_the_limit():
    return [b" " * CHUNK] * (4 * LIMIT // CHUNK)


@pytest.fixture
def small_bodies(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = LIMIT


async def test_a_body_declared_over_the_limit_is_refused_before_any_of_it_is_read(small_bodies):
    client = Client(four_times_the_limit(), length=LIMIT + 1)

    status, headers, body = await client.answer()

    assert status == 413 and client.read == 0
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "too_large"


async def test_a_chunked_body_is_read_no_further_than_past_the_limit(small_bodies):
    client = Client(four_times_the_limit())

    status, _, body = await client.answer()

    assert status == 413
    assert LIMIT < client.read <= LIMIT + CHUNK
    assert json.loads(body)["error"]["code"] == "too_large"


async def test_a_page_gets_the_refusal_as_text(small_bodies):
    client = Client(four_times_the_limit(), length=LIMIT * 10, path="/studio/ashmere/agents/import/")

    status, headers, body = await client.answer()

    assert (status, client.read) == (413, 0)
    assert headers["content-type"].startswith("text/plain") and b"STUDIO_MAX_BODY_BYTES" in body


# --- a real Daphne server ---------------------------------------------------------------------

needs_redis = pytest.mark.skipif(not settings.REDIS_URL, reason="the server runs on this test run's Redis")


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    processes, urls = start_web(tmp_path_factory.mktemp("web"), 1, STUDIO_MAX_BODY_BYTES=str(LIMIT))
    yield urls[0]
    stop_web(processes)


def raw_request(url: str, head: str, body_chunks=(), timeout=10) -> bytes:
    """Send a request's head and some of its body, and read what the
    server answers meanwhile, without sending the rest."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head.encode())
        for chunk in body_chunks:
            sock.sendall(chunk)
        answer, deadline = b"", time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not data:
                break
            answer += data
            if b"\r\n\r\n" in answer and answer.split(b"\r\n\r\n", 1)[1].endswith(b"}"):
                break
        return answer


def head(*lines: str) -> str:
    return "\r\n".join(["POST /api/v1/agents/dm/messages HTTP/1.1", "Host: 127.0.0.1", *lines, "", ""])


@needs_redis
def test_daphne_refuses_a_body_declared_over_the_limit_on_its_headers(web):
    answer = raw_request(web, head("Content-Type: application/json", f"Content-Length: {100 * LIMIT}"))

    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413")
    assert json.loads(rest.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "too_large"


@needs_redis
def test_daphne_stops_a_chunked_body_once_it_passes_the_limit(web):
    chunk = b"%x\r\n%s\r\n" % (CHUNK, b" " * CHUNK)
    chunks = [chunk] * (LIMIT // CHUNK + 1)

    answer = raw_request(web, head("Content-Type: application/json", "Transfer-Encoding: chunked"), chunks)

    assert answer.startswith(b"HTTP/1.1 413")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "too_large"


@needs_redis
@pytest.mark.django_db(transaction=True)
def test_daphne_still_serves_a_body_under_the_limit(web, admin_key):
    body = json.dumps({"systemPrompt": "x" * (LIMIT // 2)})
    answer = raw_request(
        web,
        head(
            f"Authorization: Bearer {admin_key}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        ).replace("POST /api/v1/agents/dm/messages", "PUT /api/v1/agents/dm"),
        [body.encode()],
    )

    assert answer.startswith(b"HTTP/1.1 201"), answer[:300]


@needs_redis
@pytest.mark.django_db(transaction=True)
def test_daphne_leaves_a_form_body_to_the_studio(web, define, admin_key):
    """Twisted would parse a POST's form body itself, on the event loop, for
    arguments Daphne never reads — and answer a malformed multipart body
    with its own bare 400 before the studio sees it."""
    define("dm")
    body = b"no multipart at all"
    answer = raw_request(
        web,
        head(
            f"Authorization: Bearer {admin_key}",
            "Content-Type: multipart/form-data; boundary=x",
            f"Content-Length: {len(body)}",
        ),
        [body],
    )

    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 415"), answer[:300]
    assert json.loads(rest.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "unsupported_media_type"
