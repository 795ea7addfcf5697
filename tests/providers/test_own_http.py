"""The `openai:` provider's streamed calls on the studio's own HTTP/1.1
connections (agents/providers/http1.py), against a server that sends what
a test wrote byte for byte: what the SDK's HTTP stack read is read the
same, and where a proxy is configured the SDK's stack carries the call."""

import gzip
import itertools
import json
import resource
import socket
import ssl
import zlib

import httpx2
import pytest

from agents.models import TurnStatus
from agents.providers.http1 import Pool, sdk_route
from billing.models import CostLine
from tests.support import fake_anthropic
from tests.support.proxy import certificate
from tests.support.raw_http import RawServer, answer, sse_body
from tests.support.sending import turn_send

from .conftest import LATER_THAN_ANY_WAIT, failure_logged

_keys = itertools.count()


def _proxied(monkeypatch, proxy: RawServer) -> None:
    """HTTP_PROXY set to `proxy`, and no other proxy setting."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))


@pytest.fixture
def model(define, settings, studio_conf):
    """`model(*answers, **server options)` → (agent, server): an agent whose
    model is a `RawServer` answering `answers` in turn, with no retries (a
    call that fails shows as a failed turn)."""
    servers: list[RawServer] = []
    studio_conf(MODEL_MAX_RETRIES=0, MODEL_TIMEOUT_SECONDS=10)

    def start(*answers: bytes, **options):
        server = RawServer(*answers, **options)
        servers.append(server)
        # A key of its own: a client of its own (clients are kept per key and address).
        settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY = server.base_url, f"raw-{next(_keys)}"
        return define("dm", model="openai:gpt-test", system_prompt="You are the dungeon master."), server

    yield start
    for server in servers:
        server.stop()


def test_answers_sized_or_gzip_encoded_are_read_on_one_kept_connection(model):
    dm, server = model(answer(sse_body("One."), encoding="gzip"), answer(sse_body("Two."), sized=True))

    first = turn_send(agent=dm, content="Hello.")
    second = turn_send(agent=dm, content="Again.")

    assert (first.status, first.reply) == (TurnStatus.COMPLETED, "One.")
    assert (second.status, second.reply) == (TurnStatus.COMPLETED, "Two.")
    assert server.request_lines == ["POST /v1/chat/completions HTTP/1.1"] * 2
    assert server.connections == 1


def test_a_connection_the_server_closed_while_idle_is_not_used_again(model):
    dm, server = model(answer(sse_body("One.")), answer(sse_body("Two.")), close_after_answer=True)
    assert turn_send(agent=dm, content="Hello.").status == TurnStatus.COMPLETED
    assert server.closed.wait(30)

    turn = turn_send(agent=dm, content="Again.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Two.")
    assert server.connections == 2


def test_an_http_1_0_answer_does_not_leave_its_connection_for_the_next_call(model):
    one, two = (answer(sse_body(text), sized=True, version="1.0") for text in ("One.", "Two."))
    dm, server = model(one, two, one_per_connection=True)

    replies = [turn_send(agent=dm, content=content).reply for content in ("Hello.", "Again.")]

    assert replies == ["One.", "Two."]
    assert server.connections == 2


def test_a_broken_chunk_fails_the_turn_as_an_answer_that_broke_off(model):
    good = answer(sse_body("The chapel is cold."))
    head, _, _ = good.partition(b"\r\n\r\n")
    dm, _ = model(head + b"\r\n\r\nzz\r\ndata: {}\r\n")

    turn = turn_send(agent=dm, content="Hello.")

    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "model_error")
    assert "broke off" in turn.error


def test_with_a_proxy_configured_the_call_goes_through_it(model, monkeypatch, settings):
    dm, proxy = model(answer(sse_body("Through the proxy.")))
    _proxied(monkeypatch, proxy)
    settings.OPENAI_BASE_URL = "http://model.invalid/v1"

    turn = turn_send(agent=dm, content="Hello.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Through the proxy.")
    assert proxy.request_lines == ["POST http://model.invalid/v1/chat/completions HTTP/1.1"]


@pytest.mark.parametrize("trusted", [True, False])
def test_an_https_server_is_used_only_with_a_certificate_the_studio_trusts(
    model, monkeypatch, tmp_path, caplog, trusted
):
    cert, key = certificate(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    if trusted:  # as the SDK's own stack reads it
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    dm, server = model(answer(sse_body("Over TLS.")), tls=tls)

    turn = turn_send(agent=dm, content="Hello.")

    if trusted:
        assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Over TLS.")
    else:
        assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "model_error")
        assert "could not be reached" in turn.error
        assert "CERTIFICATE_VERIFY_FAILED" in failure_logged(caplog, turn)
        assert server.request_lines == []


def test_a_redirect_is_followed_as_the_sdk_followed_it(model):
    dm, server = model(b"", b"", answer(sse_body("Moved.")))
    moved = server.base_url.replace("/v1", "/v2")
    server.answers[:2] = [
        f"HTTP/1.1 307 Moved\r\nLocation: {moved}/chat/completions\r\nContent-Length: 0\r\n\r\n".encode()
    ] * 2

    turn = turn_send(agent=dm, content="Hello.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Moved.")
    # The studio's connection hands the call to the SDK's stack, which follows the redirect.
    assert server.request_lines[-1] == "POST /v2/chat/completions HTTP/1.1"


def test_with_no_proxy_alone_the_call_stays_on_the_studios_connections(model, monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    dm, server = model(answer(sse_body("Direct.")))

    assert turn_send(agent=dm, content="Hello.").reply == "Direct."
    assert b"\r\nAccept-Encoding: identity" in server.heads[0]  # the studio's head, not httpx's


def test_a_stream_whose_lines_end_in_a_lone_cr_is_read(model):
    dm, _ = model(answer(sse_body("The chapel is cold.").replace(b"\n", b"\r")))

    turn = turn_send(agent=dm, content="Hello.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "The chapel is cold.")


# --- what httpx read, read the same (the pool on its own) ----------------------------


def _post(*answers: bytes, body: bytes = b"{}", **options):
    server = RawServer(*answers, **options)
    pool = Pool(server.base_url, connect_timeout=5, read_timeout=10, tls_context=None)
    return pool, pool.post(pool.request_head("/chat/completions", {}), body)


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi",
        b"HTTP/1.1 200 OK\r\nX-Long: one\r\n two\r\nContent-Length: 2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: none\r\nContent-Length: 2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nContent-Length: 4\r\n\r\n"
        + zlib.compress(b"hi")[2:-4],
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip, gzip\r\nContent-Length: %d\r\n\r\n%s"
        % (len(gzip.compress(gzip.compress(b"hi"))), gzip.compress(gzip.compress(b"hi"))),
    ],
    ids=["length-twice", "length-listed", "bare-lf", "folded", "unknown-coding", "raw-deflate", "gzip-twice"],
)
def test_an_answer_httpx_read_is_read(raw):
    _, got = _post(raw)
    assert got.read() == b"hi"


def test_an_answer_without_a_body_is_not_waited_for():
    no_body = b"HTTP/1.1 204 No Content\r\n\r\n"
    _, got = _post(no_body, no_body)  # a second answer to give: the server keeps the connection open
    assert (got.status_code, got.read()) == (204, b"")


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 2\xb200 OK\r\nContent-Length: 2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1_0\r\n%s\r\n0\r\n\r\n" % (b"x" * 16),
    ],
    ids=["status", "length", "chunk-size"],
)
def test_a_malformed_answer_fails_as_an_http_error(raw):
    with pytest.raises(httpx2.HTTPError):
        _post(raw)[1].read()


def test_a_body_that_breaks_off_raises_an_error_naming_its_request_and_its_try():
    """As httpx raises it: the SDK's errors read the request, and the studio
    the retry count in it (how often the call was tried)."""
    import openai

    broken = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ndata:XX\r\n"
    server = RawServer(broken)
    route = sdk_route(openai.OpenAI(base_url=server.base_url, api_key="k"), "/chat/completions", openai)

    got = route.post(b"{}", 2)
    with pytest.raises(httpx2.RequestError) as raised:
        got.read()

    assert raised.value.request.url == server.base_url + "/chat/completions"
    assert raised.value.request.headers["x-stainless-retry-count"] == "2"


def test_an_answer_sent_before_the_request_was_taken_whole_is_that_answer():
    error = b'{"error": {"message": "Request too large."}}'
    raw = b"HTTP/1.1 413 Too Large\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(error), error)
    _, got = _post(raw, body=b"[" + b" " * 30_000_000 + b"]", before_body=True)
    assert (got.status_code, got.read()) == (413, error)


def test_idle_connections_are_used_again_past_1024_open_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open {hard} files at most")
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (1200 if hard == resource.RLIM_INFINITY else min(hard, 4096), hard)
    )
    held = [socket.socket() for _ in range(1100)]  # a busy web process's sockets
    try:
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
        server = RawServer(ok, ok, ok)
        pool = Pool(server.base_url, connect_timeout=5, read_timeout=10, tls_context=None)
        for _ in range(3):
            got = pool.post(pool.request_head("/chat/completions", {}), b"{}")
            assert got.read() == b"hi"
            got.close()
        assert server.connections == 1
    finally:
        for sock in held:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --- the anthropic: provider ---------------------------------------------------------------


def _sse(events) -> bytes:
    """Named events as a server sends them; a None data sends no data line."""
    return b"".join(
        f"event: {name}\n".encode()
        + (b"" if data is None else f"data: {json.dumps(data)}\n".encode())
        + b"\n"
        for name, data in events
    )


@pytest.fixture
def claude(define, settings, studio_conf):
    """`claude(server, base_url=None)` → an agent on `anthropic:claude-test` at `server`."""
    studio_conf(MODEL_MAX_RETRIES=0, MODEL_TIMEOUT_SECONDS=10, ALLOW_UNPRICED_MODELS=True)

    def start(server: RawServer, base_url: str | None = None):
        settings.ANTHROPIC_BASE_URL = base_url or server.base_url.removesuffix("/v1")
        settings.ANTHROPIC_API_KEY = f"raw-{next(_keys)}"
        return define("claude", model="anthropic:claude-test", system_prompt="You are the ferryman.")

    return start


def test_an_anthropic_stream_is_read_on_the_studios_connection(claude, settings):
    events = fake_anthropic.stream_events(
        fake_anthropic.message(fake_anthropic.text("Two coins, and I row.")).body
    )
    server = RawServer(answer(_sse(events)))
    try:
        turn = turn_send(agent=claude(server), content="Take me across.")
    finally:
        server.stop()

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Two coins, and I row.")
    assert server.request_lines == ["POST /v1/messages HTTP/1.1"]
    assert b"\r\nAccept-Encoding: identity" in server.heads[0]  # the studio's head, not httpx's
    assert settings.ANTHROPIC_API_KEY.encode() in server.heads[0]  # the key, as the SDK sends it


def test_an_anthropic_stream_behind_a_proxy_is_read_by_the_sdk(claude, monkeypatch):
    events = fake_anthropic.stream_events(
        fake_anthropic.message(fake_anthropic.text("Through the mist.")).body
    )
    # An event whose data is not an object (the SDK hands it on as it is) is passed over.
    proxy = RawServer(answer(_sse([events[0], ("keepalive", "alive"), *events[1:]])))
    _proxied(monkeypatch, proxy)
    try:
        turn = turn_send(agent=claude(proxy, base_url="http://model.invalid"), content="Take me across.")
    finally:
        proxy.stop()

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Through the mist.")
    assert proxy.request_lines == ["POST http://model.invalid/v1/messages HTTP/1.1"]


def test_a_stream_that_times_out_after_a_retry_says_how_often_it_was_tried(define, fake, studio_conf, caplog):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, MODEL_MAX_RETRIES=1, ALLOW_UNPRICED_MODELS=True)
    fake.push(
        fake_anthropic.error(529, "overloaded_error", "Overloaded"),
        fake_anthropic.message(fake_anthropic.text("one two three four"), pause=LATER_THAN_ANY_WAIT),
    )
    dm = define("dm", model="anthropic:claude-test", system_prompt="You are the dungeon master.")

    turn = turn_send(agent=dm, content="Hello?")

    assert "timed out after 0.5 s (tried 2 times)" in failure_logged(caplog, turn)


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n", "answered 302"),
        (
            answer(
                _sse(
                    [
                        *fake_anthropic.stream_events(
                            fake_anthropic.message(fake_anthropic.text("one two")).body
                        )[:3],
                        ("error", None),
                    ]
                )
            ),
            "answered 200",
        ),
    ],
    ids=["redirect-to-nowhere", "error-event-without-data"],
)
def test_what_the_sdk_raised_as_a_status_error_fails_the_turn_so(claude, caplog, raw, said):
    server = RawServer(raw)
    try:
        turn = turn_send(agent=claude(server), content="Take me across.")
    finally:
        server.stop()

    assert turn.status == TurnStatus.FAILED
    assert said in failure_logged(caplog, turn)
    assert not CostLine.objects.filter(turn_id=turn.uuid, kind="model", detail__inputTokens__gt=0).exists()
