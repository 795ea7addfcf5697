"""The access log is the studio's own: the ASGI application writes one line
per HTTP request, and one per WebSocket when it closes — at any
STUDIO_LOG_LEVEL, as JSON with STUDIO_LOG_FORMAT=json: method, path (never
the query), status, duration, the client's address (Daphne's, from the
proxy's headers with --proxy-headers) and the request id, the one the
response carries. The requests here go through the real ASGI application,
as Daphne hands them over."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings

from studio.asgi import application
from tests.support.asgi import asgi_request, http_scope
from tests.support.logs import json_lines_logged

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def json_log():
    yield from json_lines_logged(20)


@pytest.fixture
def default_level_log():
    yield from json_lines_logged(30)


def access_lines(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["logger"] == "studio.access"]


async def test_a_request_is_logged_once_with_its_method_path_status_duration_client_and_id(json_log):
    status, headers = await asgi_request(
        http_scope("/healthz", query=b"probe=k8s", headers=[(b"x-request-id", b"acc-1")])
    )

    [line] = access_lines(json_log())
    assert (status, headers["x-request-id"]) == (200, "acc-1")
    assert line["level"] == "INFO"
    assert {key: line[key] for key in ("method", "path", "status", "client", "request_id")} == {
        "method": "GET",
        "path": "/healthz",
        "status": 200,
        "client": "203.0.113.9",
        "request_id": "acc-1",
    }
    assert 0 <= line["duration"] < 10
    assert line["message"] == f"GET /healthz 200 {line['duration']:.3f} s from 203.0.113.9, request acc-1"


async def test_a_request_without_an_id_is_logged_under_the_one_its_response_carries(json_log):
    _, headers = await asgi_request(http_scope("/healthz", headers=[(b"x-request-id", b"not sane")]))

    [line] = access_lines(json_log())
    assert len(headers["x-request-id"]) == 32
    assert line["request_id"] == headers["x-request-id"]


async def test_the_access_log_is_written_at_the_default_log_level(default_level_log):
    await asgi_request(http_scope("/api/v1/nothing-here"))

    [line] = access_lines(default_level_log())
    assert (line["path"], line["status"]) == ("/api/v1/nothing-here", 404)


async def test_a_body_refused_before_any_view_is_logged_with_its_413(json_log):
    too_long = str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1).encode()
    scope = http_scope(
        "/api/v1/agents/dm/messages",
        method="POST",
        headers=[(b"content-length", too_long), (b"x-request-id", b"acc-413")],
    )

    status, headers = await asgi_request(scope)

    [line] = access_lines(json_log())
    assert (status, headers["x-request-id"]) == (413, "acc-413")
    assert (line["method"], line["status"], line["request_id"]) == ("POST", 413, "acc-413")


async def test_with_the_access_log_off_no_line_is_written(json_log, settings):
    settings.STUDIO_ACCESS_LOG = False

    await asgi_request(http_scope("/healthz"))

    assert access_lines(json_log()) == []


async def test_a_websocket_is_logged_when_it_closes_with_how_it_ended(json_log, define, designer_key):
    """Accepted (101), then closed by its client; accepted and closed by the
    studio, with its code (a wrong key: 4401, which the client can read);
    refused before it was accepted (a browser's foreign Origin: 403)."""
    await database_sync_to_async(define)("dm")
    path = "/ws/v1/agents/dm/events"
    cases = [
        ("ws-ok", designer_key, []),
        ("ws-key", "sk_wrong", []),
        ("ws-origin", designer_key, [(b"origin", b"https://evil.example")]),
    ]

    for request_id, key, headers in cases:
        listener = WebsocketCommunicator(
            application,
            path,
            headers=[(b"x-request-id", request_id.encode()), *headers],
            subprotocols=["studio.v1", f"bearer.{key}"],
        )
        connected, _ = await listener.connect(timeout=60)
        if connected:
            await listener.disconnect()
        else:  # Daphne tells the application the socket is gone
            await listener.send_input({"type": "websocket.disconnect", "code": 1006})
            await listener.wait(5)

    lines = {line["request_id"]: line for line in access_lines(json_log())}
    assert {
        request_id: (line["path"], line["status"], line.get("close_code"))
        for request_id, line in lines.items()
    } == {
        "ws-ok": (path, 101, None),
        "ws-key": (path, 101, 4401),
        "ws-origin": (path, 403, None),
    }
