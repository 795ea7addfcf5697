"""One error family for the whole studio, and its one wire shape.

Domain code raises `DomainError` (or a subclass) with a stable `code` and a
sentence a person can act on; the API turns it, and DRF's own exceptions,
into `{"error": {"code", "message"}}` in `api_exception_handler`. Bad input
adds `details`: one `{"field", "message"}` for each problem found.
"""

import logging

from django import db
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

log = logging.getLogger(__name__)


class DomainError(Exception):
    status = 400
    code = "invalid_request"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        retry_after: int = 1,
        details: list[dict] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.details = details
        if code:
            self.code = code
        if status:
            self.status = status
        # Seconds to wait before trying again: sent as Retry-After with every 429 and 503.
        self.retry_after = max(int(retry_after), 1)

    def headers(self) -> dict:
        return {"Retry-After": str(self.retry_after)} if self.status in (429, 503) else {}


def _kind(name: str, status: int, code: str) -> type[DomainError]:
    """A DomainError with its own status and default code."""
    return type(name, (DomainError,), {"status": status, "code": code, "__module__": __name__})


NotFound = _kind("NotFound", 404, "not_found")
Conflict = _kind("Conflict", 409, "conflict")
PaymentRequired = _kind("PaymentRequired", 402, "budget_exhausted")
Unavailable = _kind("Unavailable", 503, "unavailable")


def error_body(code: str, message: str, details: list[dict] | None = None) -> dict:
    error = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return {"error": error}


def validation_details(detail, path: str = "") -> list[dict]:
    """DRF validation details as `{"field", "message"}` problems; `field` is
    the input's dotted path, an item of a list named by its index
    (`blocks[3].status`), None for the request as a whole."""
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            if isinstance(key, int):  # a ListField's item
                out += validation_details(value, f"{path}[{key}]")
                continue
            name = key if key != "non_field_errors" else ""
            out += validation_details(value, f"{path}.{name}" if path and name else (name or path))
        return out
    if isinstance(detail, list):  # a list serializer's items are dicts
        return [
            problem
            for index, item in enumerate(detail)
            for problem in validation_details(item, f"{path}[{index}]" if isinstance(item, dict) else path)
        ]
    return [{"field": path or None, "message": str(detail)}]


# A refusal costs little whatever the input holds: its message names the
# first MESSAGE_PROBLEMS problems and its details list the first
# DETAILS_MAX, one last entry counting the rest; each field path and each
# problem's sentence is cut to PROBLEM_MAX_CHARS (a key or a value the
# client sent can be as long as its body).
MESSAGE_PROBLEMS = 5
DETAILS_MAX = 20
PROBLEM_MAX_CHARS = 200


def invalid_input(detail, code: str = "invalid_request") -> DomainError:
    """The 400 for input that failed validation: its problems in `details`,
    and the first of them as 'field: problem' sentences in the message."""
    return problems_refused(validation_details(detail), code=code)


def problems_refused(problems: list[dict], *, code: str = "invalid_request") -> DomainError:
    """The 400 naming `problems` (`{"field", "message"}` each), within the bounds above."""
    problems = [{"field": _cut(p["field"]), "message": _cut(p["message"])} for p in problems]
    sentences = [f"{p['field']}: {p['message']}" if p["field"] else p["message"] for p in problems]
    message = "; ".join(sentences[:MESSAGE_PROBLEMS]) or "The request is not valid."
    if len(sentences) > MESSAGE_PROBLEMS:
        message += f"; and {_more(len(sentences) - MESSAGE_PROBLEMS)}"
    details = problems[:DETAILS_MAX]
    if len(problems) > DETAILS_MAX:
        details.append({"field": None, "message": f"and {_more(len(problems) - DETAILS_MAX)}, not listed"})
    return DomainError(message, code=code, details=details)


def _more(count: int) -> str:
    return f"{count:,} more problem{'s' if count != 1 else ''}"


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= PROBLEM_MAX_CHARS:
        return text
    return text[: PROBLEM_MAX_CHARS - 1] + "…"


_DRF_CODES = [
    (drf.NotAuthenticated, "unauthenticated"),
    (drf.AuthenticationFailed, "unauthenticated"),
    (drf.PermissionDenied, "forbidden"),
    (drf.NotFound, "not_found"),
    (drf.MethodNotAllowed, "method_not_allowed"),
    (drf.ParseError, "invalid_json"),
    (drf.UnsupportedMediaType, "unsupported_media_type"),
    (drf.NotAcceptable, "not_acceptable"),
    (drf.Throttled, "rate_limited"),
]


def api_exception_handler(exc, context):
    _answer_in_json(context.get("request"))
    if isinstance(exc, drf.ValidationError):
        exc = invalid_input(exc.detail)
    if isinstance(exc, DomainError):
        body = error_body(exc.code, exc.message, exc.details)
        return Response(body, status=exc.status, headers=exc.headers())
    if isinstance(exc, Http404):
        return Response(error_body("not_found", "Nothing here."), status=404)
    if isinstance(exc, (db.OperationalError, db.InterfaceError)):
        log.warning("database unavailable", exc_info=exc)
        body, status, headers = database_unavailable()
        return Response(body, status=status, headers=headers)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("too_large", "The request body is larger than this API accepts."), status=413
        )
    if isinstance(exc, PermissionDenied):
        return Response(error_body("forbidden", "This key may not do that."), status=403)
    if not isinstance(exc, drf.APIException):
        return None  # a real bug: Django's 500 handler (JSON under /api/) takes it
    code = next((c for cls, c in _DRF_CODES if isinstance(exc, cls)), "error")
    message = str(exc.detail)
    if isinstance(exc, drf.UnsupportedMediaType):
        message += ' Send the body as JSON, with the header "Content-Type: application/json".'
    response = Response(error_body(code, message), status=exc.status_code)
    if getattr(exc, "auth_header", None):
        response["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        response["Retry-After"] = str(int(exc.wait))
    return response


def _answer_in_json(request) -> None:
    """Errors are JSON even from views that answer in another format when
    all goes well (the schema in YAML, the docs in HTML)."""
    if request is not None:
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = JSONRenderer.media_type


def database_unavailable() -> tuple[dict, int, dict]:
    """The 503 for a database that cannot be reached (or a connection pool
    with none free): body, status, headers."""
    message = "The studio's database is unavailable for a moment; try again."
    return error_body("unavailable", message), 503, {"Retry-After": "1"}


def json_error_view(status: int, code: str, message: str):
    # API clients send no CSRF token: checked, a POST to an unknown endpoint
    # would be Django's HTML "CSRF verification failed" page, not this error.
    @csrf_exempt
    def view(request, exception=None):
        return JsonResponse(error_body(code, message), status=status)

    return view
