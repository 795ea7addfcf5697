from django.http import JsonResponse
from django.shortcuts import render
from django.views import csrf, defaults
from django.views.defaults import server_error as html_server_error

from .errors import error_body


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
