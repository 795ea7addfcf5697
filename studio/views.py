import hmac

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe
from django.views.defaults import server_error as html_server_error

from . import health, metrics
from .errors import error_body

READINESS_RETRY_SECONDS = 5


def home(request):
    return render(request, "home.html")


def server_error(request):
    """JSON for the API (never a stack trace), Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            error_body("internal_error", "Something went wrong on our side; it has been logged."),
            status=500,
        )
    return html_server_error(request)


@require_safe
def healthz(request):
    return JsonResponse(health.liveness())


@require_safe
def readyz(request):
    ready, body = health.readiness()
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
    return HttpResponse(metrics.metrics_text(), content_type=metrics.CONTENT_TYPE)


def _metrics_allowed(request) -> bool:
    token = settings.STUDIO_METRICS_TOKEN
    if not token:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())
