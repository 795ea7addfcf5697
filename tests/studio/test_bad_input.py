"""Bad bodies get a clear error in the API's one error shape, never a 500."""

import pytest

from ..conftest import error_of


@pytest.mark.parametrize(
    "body, status, code",
    [
        (b'{"content": "' + b"x" * 3_000_000 + b'"}', 413, "too_large"),
        (b'{"content": "\xff\xfe"}', 400, "invalid_json"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "invalid_json"),
        (b'{"content": "hi"', 400, "invalid_json"),
        (b'["a list"]', 400, "invalid_request"),
        (b'{"content": "hi", "transient": "maybe"}', 400, "invalid_request"),
        (b'{"content": "hi", "extra": 1}', 400, "invalid_request"),
    ],
    ids=[
        "oversized",
        "invalid-utf8",
        "deeply-nested",
        "truncated",
        "not-an-object",
        "bad-type",
        "unknown-key",
    ],
)
def test_a_bad_send_body_is_refused_with_a_clear_error(api, agent, body, status, code):
    response = api.generic("POST", "/api/v1/agents/dm/messages", body, content_type="application/json")

    assert response.status_code == status
    assert error_of(response)["code"] == code


def test_a_form_body_is_unsupported_media(api, agent):
    response = api.generic(
        "POST", "/api/v1/agents/dm/messages", b"content=hi", content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 415
    assert error_of(response)["code"] == "unsupported_media_type"


def test_a_database_that_is_briefly_unavailable_is_a_503_to_try_again(api, agent, monkeypatch):
    from django.db import OperationalError

    def refuse(**kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr("agents.api.agent_get", refuse)

    response = api.get("/api/v1/agents/dm")

    assert response.status_code == 503
    assert error_of(response)["code"] == "unavailable"
    assert response["Retry-After"] == "1"


def test_a_page_whose_database_is_briefly_unavailable_is_a_503_to_try_again(db, client, monkeypatch):
    from django.contrib.auth import get_user_model
    from django.db import OperationalError

    client.force_login(get_user_model().objects.create_user("mara", password="pw"))

    def refuse(*args, **kwargs):
        raise OperationalError("the pool has no connection free")

    monkeypatch.setattr("studio.pages.render", refuse)

    response = client.get("/studio/")

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert b"unavailable for a moment" in response.content
