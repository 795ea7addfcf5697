"""OpenAPI pieces shared by every app's API: the bearer key scheme and the
one error shape."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse
from drf_spectacular.views import SpectacularSwaggerView
from rest_framework import serializers


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "studio.auth.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key of one game: `Authorization: Bearer sk_…`.",
        }


class Problem(serializers.Serializer):
    field = serializers.CharField(
        allow_null=True,
        help_text="The input at fault: a query parameter, or a body field by its dotted path "
        "(`memory.maxOpenTokens`); null for the request as a whole.",
    )
    message = serializers.CharField(help_text="What is wrong with it.")


class ErrorDetail(serializers.Serializer):
    code = serializers.CharField(help_text="Stable, machine-readable: e.g. invalid_definition.")
    message = serializers.CharField(help_text="A sentence a person can act on.")
    details = Problem(
        many=True,
        required=False,
        help_text="On bad input (a 400 of validation): each problem found — the first 20, then one "
        "entry (field null) counting the rest.",
    )


class Error(serializers.Serializer):
    error = ErrorDetail()


_WHY = {
    400: "Bad input (the code says which rule).",
    401: "No key, or not a valid key.",
    402: "The game has no credits left.",
    403: "The key's role may not do this.",
    404: "No such object in this key's game.",
    405: "The method is not allowed here.",
    409: "The object is not in a state that allows this.",
    413: "Too large: the request body, or a message that could never fit the agent's context "
    "(`context_too_large`).",
    422: "The Idempotency-Key was used for a different message (`idempotency_mismatch`).",
    429: "Too many sends for this key (`rate_limited`), or for this agent's queue (`agent_busy`); "
    "wait as Retry-After says.",
    503: "Busy or unavailable; try again after Retry-After.",
}


def errors(*statuses: int) -> dict:
    """Error responses for `extend_schema(responses=…)`; 401 always."""
    return {s: OpenApiResponse(Error, description=_WHY[s]) for s in sorted({401, *statuses})}


class DocsView(SpectacularSwaggerView):
    """The interactive docs. OPTIONS is 405: DRF would describe the view
    through its HTML renderer, which has no template for that (a 500)."""

    metadata_class = None


def event_streams(result, generator, request, public):
    """drf-spectacular hook: each server-sent events answer names the events
    it carries, each with its schema from the event catalogue (components
    `Event…`), under `x-events` (OpenAPI 3.0 has no way of its own to say
    what a text/event-stream holds)."""
    from studio.live import event_types

    components = result.setdefault("components", {}).setdefault("schemas", {})
    events = {}
    for shape in event_types.TURN_STREAM:
        name = "Event" + shape.__name__
        components[name] = event_types.json_schema(shape)
        events[event_types.type_name(shape)] = {"$ref": f"#/components/schemas/{name}"}
    for path in result.get("paths", {}).values():
        for operation in path.values():
            answer = operation.get("responses", {}).get("200", {})
            if operation.get("operationId") == "agent_send":
                # drf-spectacular keeps one 200 per operation: the send's stream is added here.
                answer.setdefault("content", {})["text/event-stream"] = {
                    "schema": {"type": "string", "description": "With stream: the turn's events."}
                }
            stream = answer.get("content", {}).get("text/event-stream")
            if stream is not None:
                stream["schema"] = {**stream.get("schema", {"type": "string"}), "x-events": events}
    return result
