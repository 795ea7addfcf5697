"""The studio's middleware, and Django's run synchronously under ASGI.

Django's built-in middleware are "async-capable" by running each of their
hooks through `sync_to_async`: under Daphne a request crossed between the
event loop and a worker thread for every hook before it reached a view.
Declared sync-only, the whole stack runs in one worker thread and a request
crosses a few times, which every request pays for in CPU (the figures are
in docs/performance.md).

MIDDLEWARE names Django's classes by their own dotted paths, so Django's
deployment checks (`manage.py check --deploy`) find them; they are declared
sync-only on the classes themselves when the studio app is ready, before
any handler loads its middleware. Behaviour is otherwise unchanged.
"""

import logging

from django import db
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.core.signals import request_finished
from django.http import HttpResponse, JsonResponse
from django.middleware import clickjacking, common, csrf, security

from studio.errors import database_unavailable
from studio.ops import logs

log = logging.getLogger(__name__)

DJANGO_MIDDLEWARE = (
    security.SecurityMiddleware,
    sessions.SessionMiddleware,
    common.CommonMiddleware,
    csrf.CsrfViewMiddleware,
    auth.AuthenticationMiddleware,
    messages.MessageMiddleware,
    clickjacking.XFrameOptionsMiddleware,
)


def django_middleware_declare_sync_only() -> None:
    """Django's middleware, declared sync-only (StudioConfig.ready)."""
    # Speed: ~2.5 ms of CPU per request in thread crossings; guarded by bench/agent_server.py (server CPU per message).
    for middleware in DJANGO_MIDDLEWARE:
        middleware.async_capable = False


class RequestIdMiddleware:
    """Every request gets an id — the client's `X-Request-ID` when it is a
    sane value, else a new one — echoed on the response and carried by
    every line logged while the request runs."""

    sync_capable, async_capable = True, False

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request_id = logs.request_id_choose(request.headers.get("X-Request-ID"))
        logs.request_id_set(request_id)
        response = self.get_response(request)
        response["X-Request-ID"] = request_id
        return response


def _request_id_forget(**kwargs):
    # A thread that serves one request after another (WSGI, the test
    # client) logs nothing between them under the last one's id.
    logs.request_id_set(None)


request_finished.connect(_request_id_forget, dispatch_uid="studio.request_id_forget")


class DatabaseUnavailableMiddleware:
    """A page whose database cannot be reached (or whose connection pool has
    none free in time) answers 503 with Retry-After, not a 500 — as the API
    does in its exception handler."""

    sync_capable, async_capable = True, False

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, (db.OperationalError, db.InterfaceError)):
            return None
        log.warning("database unavailable", exc_info=exception)
        body, status, headers = database_unavailable()
        if request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", ""):
            return JsonResponse(body, status=status, headers=headers)
        return HttpResponse(
            body["error"]["message"], status=status, headers=headers, content_type="text/plain"
        )
