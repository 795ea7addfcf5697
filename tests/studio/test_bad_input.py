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
        (b'{"content": "half \\ud83d of an emoji"}', 400, "invalid_request"),
    ],
    ids=[
        "oversized",
        "invalid-utf8",
        "deeply-nested",
        "truncated",
        "not-an-object",
        "bad-type",
        "unknown-key",
        "lone-surrogate",
    ],
)
def test_a_bad_send_body_is_refused_with_a_clear_error(api, agent, body, status, code):
    response = api.generic("POST", "/api/v1/agents/dm/messages", body, content_type="application/json")

    assert response.status_code == status
    assert error_of(response)["code"] == code


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/api/v1/agents/dm/messages", f'{{"content": "hi", "transient": {nested(101)}}}'),
        ("PUT", "/api/v1/agents/dm", f'{{"systemPrompt": {nested(101)}}}'),
        ("POST", "/api/v1/agents/import", f'{{"format": "studio.agent", "config": {nested(101)}}}'),
        ("POST", "/api/v1/agents/import", nested(100_000)),
    ],
    ids=["send", "define", "import", "import-past-the-recursion-limit"],
)
def test_a_body_nested_deeper_than_the_studio_reads_is_400_on_every_route(
    admin_api, agent, method, path, body
):
    response = admin_api.generic(method, path, body.encode(), content_type="application/json")

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_json"
    assert "nested more than 100 levels deep" in error["message"]


def test_a_body_nested_as_deep_as_the_studio_reads_is_parsed(admin_api, agent):
    body = f'{{"systemPrompt": {nested(99)}}}'  # the object is the hundredth level

    response = admin_api.generic("PUT", "/api/v1/agents/dm", body.encode(), content_type="application/json")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_definition"  # read, then refused for what it says


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

    monkeypatch.setattr("agents.selectors.agent_with_stats", refuse)

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

    monkeypatch.setattr("studio.pages.shell.render", refuse)

    response = client.get("/studio/")

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert b"unavailable for a moment" in response.content


def test_a_snake_case_field_is_refused_naming_the_field_meant(admin_api):
    response = admin_api.put(
        "/api/v1/agents/dm", {"system_prompt": "You are the dungeon master."}, format="json"
    )

    assert response.status_code == 400
    assert error_of(response)["details"] == [
        {"field": "system_prompt", "message": "is not a field here; did you mean 'systemPrompt'?"}
    ]


def test_a_misspelt_field_is_refused_naming_the_nearest(admin_api):
    response = admin_api.put("/api/v1/agents/dm", {"memory": {"maxOpenToken": 500}}, format="json")

    assert error_of(response)["details"][0]["message"] == "is not a field here; did you mean 'maxOpenTokens'?"


def test_a_choice_not_offered_is_refused_listing_the_choices(admin_api):
    response = admin_api.put(
        "/api/v1/agents/dm", {"compaction": {"type": "sliding", "maxTokens": 8000}}, format="json"
    )

    assert response.status_code == 400
    assert error_of(response)["details"] == [
        {
            "field": "compaction.type",
            "message": '"sliding" is not a valid choice; the choices are "summarize", "sliding-window".',
        }
    ]


def test_a_body_without_a_json_content_type_is_told_to_send_json(api, agent):
    response = api.generic(
        "POST", "/api/v1/agents/dm/messages", b'{"content": "hi"}', content_type="text/plain"
    )

    assert response.status_code == 415
    assert "Content-Type: application/json" in error_of(response)["message"]


def test_a_flag_that_is_not_true_or_false_is_refused(api, agent):
    response = api.post("/api/v1/agents/dm/messages", {"content": "hi", "transient": 1}, format="json")

    assert response.status_code == 400
    assert error_of(response)["details"] == [{"field": "transient", "message": "must be true or false"}]
