import hmac
import os

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views import csrf, defaults
from django.views.decorators.http import require_safe
from django.views.defaults import server_error as html_server_error

from . import __version__
from .errors import error_body
from .ops import health, metrics

READINESS_RETRY_SECONDS = 5


def home(request):
    return render(request, "home.html")


@require_safe
def favicon(request):
    """Where browsers and other clients look for an icon without asking the
    page: the static one (pages link it themselves)."""
    return redirect(static("favicon.ico"), permanent=True)


def server_error(request):
    """JSON for the API (never a stack trace), Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            error_body("internal_error", "Something went wrong on our side; it has been logged."),
            status=500,
        )
    return html_server_error(request)


def bad_request(request, exception):
    """A request Django refuses before any view (a Host header not in
    DJANGO_ALLOWED_HOSTS, a malformed body): JSON for the API, Django's
    page elsewhere."""
    if request.path.startswith("/api/"):
        message = (
            "The studio cannot accept this request: its Host header is not one it serves, or it is malformed."
        )
        return JsonResponse(error_body("bad_request", message), status=400)
    return defaults.bad_request(request, exception)


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: JSON for the API, Django's page elsewhere."""
    if request.path.startswith("/api/"):
        message = (
            f"The request failed the CSRF check ({reason}). The API needs no CSRF token: "
            "authenticate with an `Authorization: Bearer <api key>` header."
        )
        return JsonResponse(error_body("csrf_failed", message), status=403)
    return csrf.csrf_failure(request, reason=reason)


@require_safe
def healthz(request):
    return JsonResponse(health.liveness())


@require_safe
def readyz(request):
    """503 only when this process cannot serve sends; the status and whether
    it is degraded to anyone; what each check found (which can name hosts
    and users) and the workers seen only to a caller with the metrics
    token, when one is set."""
    ready, body = health.readiness()
    if not (settings.STUDIO_METRICS_TOKEN and _metrics_allowed(request)):
        body = {"status": body["status"], "degraded": body["degraded"]}
    else:
        # Which process answered: scripts/studioctl tells from it that the
        # proxy sends requests to a process it restarted.
        body = {**body, "version": __version__, "pid": os.getpid()}
    if ready:
        return JsonResponse(body)
    return JsonResponse(body, status=503, headers={"Retry-After": str(READINESS_RETRY_SECONDS)})


@require_safe
def metrics_view(request):
    if not _metrics_allowed(request):
        return JsonResponse(
            error_body("unauthenticated", "The metrics need 'Authorization: Bearer <STUDIO_METRICS_TOKEN>'."),
            status=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return HttpResponse(metrics.metrics_text() + metrics.database_text(), content_type=metrics.CONTENT_TYPE)


def _metrics_allowed(request) -> bool:
    token = settings.STUDIO_METRICS_TOKEN
    if not token:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())
