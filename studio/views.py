from django.http import JsonResponse
from django.shortcuts import render
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
