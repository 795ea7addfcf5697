"""The `openai:` provider's streamed calls on the studio's own HTTP/1.1
connections (agents/providers/http1.py), against a server that sends what
a test wrote byte for byte: what the SDK's HTTP stack read is read the
same, and where a proxy is configured the SDK's stack carries the call."""

import itertools
import ssl

import pytest

from agents.models import TurnStatus
from tests.support.proxy import certificate
from tests.support.raw_http import RawServer, answer, sse_body
from tests.support.sending import turn_send

from .conftest import failure_logged

_keys = itertools.count()


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
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))
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
