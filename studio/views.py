from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe
from django.views.defaults import server_error as html_server_error

from . import health
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
