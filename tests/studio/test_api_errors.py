"""Every error under /api/ is JSON in the error shape: Django's own (a CSRF
check, a refused Host, a bug) as well as DRF's, from every route."""

import re

import pytest
from django.http import HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.test import Client, RequestFactory

from studio import urls

from ..conftest import error_of

METHODS = ["get", "post", "put", "patch", "delete", "options"]
ROUTE_PARAMETERS = {
    "name": "ghost",
    "turn_id": "5b0e4c1f-9a7d-4e2b-8c6f-3d1a2b4c6e80",
    "checkpoint": "1",
    "memory": "quest",
    "replay_id": "0c7a3f52-6e1d-4b8a-9f20-7d5e4c3b2a10",
    "number": "1",
}
UNKNOWN_ENDPOINT = "/api/v1/no-such-thing"


def api_paths() -> list[str]:
    """Every route under /api/ as a path, its parameters filled in; the
    catch-all as an unknown endpoint."""
    paths = []
    for route in _routes(urls.urlpatterns):
        if route.startswith("api/"):
            route = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda match: ROUTE_PARAMETERS[match[1]], route)
            paths.append(UNKNOWN_ENDPOINT if route == "api/" else f"/{route}")
    return paths


def _routes(patterns, prefix: str = ""):
    """Each route's text, those of included lists (each app's) joined to
    their prefix."""
    for pattern in patterns:
        route = prefix + str(pattern.pattern).lstrip("^").rstrip("$")
        if hasattr(pattern, "url_patterns"):
            yield from _routes(pattern.url_patterns, route)
        else:
            yield route


@pytest.mark.parametrize("method", METHODS)
def test_any_method_on_an_unknown_api_endpoint_is_the_json_404_without_a_csrf_check(method):
    client = Client(enforce_csrf_checks=True)

    response = getattr(client, method)(UNKNOWN_ENDPOINT)

    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


@pytest.mark.parametrize("path", api_paths())
def test_every_error_of_every_api_route_is_json_and_none_is_a_500(admin_api, path):
    for method in METHODS:
        response = getattr(admin_api, method)(path, {}, format="json")

        assert response.status_code < 500, (method, path, response.content[:300])
        if response.status_code >= 400:
            error_of(response)


def a_view_that_is_not_csrf_exempt(request):
    return HttpResponse("reached")


def csrf_check(path: str):
    """Django's CSRF check on a POST without a token to a view that is not
    exempt from it; returns the refusal."""
    request = RequestFactory().post(path)
    view = a_view_that_is_not_csrf_exempt
    return CsrfViewMiddleware(view).process_view(request, view, (), {})


def test_a_csrf_failure_under_the_api_is_a_json_403_that_says_to_use_the_key():
    response = csrf_check("/api/v1/agents/dm/messages")

    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "csrf_failed"
    assert "Authorization: Bearer" in error["message"]


def test_a_csrf_failure_on_a_page_is_still_djangos_page():
    response = csrf_check("/studio/login/")

    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")


def test_a_host_that_is_not_allowed_is_a_json_400_under_the_api_and_a_page_elsewhere():
    client = Client()

    api = client.get("/api/v1/agents", HTTP_HOST="evil.example")
    page = client.get("/studio/", HTTP_HOST="evil.example")

    assert api.status_code == 400
    assert error_of(api)["code"] == "bad_request"
    assert page.status_code == 400
    assert page["Content-Type"].startswith("text/html")


def test_a_bug_behind_an_api_endpoint_is_a_json_500_that_shows_no_trace(api, agent, monkeypatch):
    def bug(**kwargs):
        raise RuntimeError("a bug that names a secret")

    monkeypatch.setattr("agents.selectors.agent_with_stats", bug)
    api.raise_request_exception = False

    response = api.get("/api/v1/agents/dm")

    assert response.status_code == 500
    assert error_of(response)["code"] == "internal_error"
    assert b"secret" not in response.content


def test_an_error_that_is_not_about_bad_input_keeps_its_two_fields(api):
    response = api.get("/api/v1/agents/ghost/turns")

    assert response.status_code == 404
    assert set(response.json()["error"]) == {"code", "message"}
