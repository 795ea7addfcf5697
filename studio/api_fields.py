"""What every app's API uses to read input: strict bodies (unknown keys
and wrong JSON types refused, not coerced), query-string serializers that
also document their bounds in the schema, and one way to turn a validation
failure into the API's one error shape."""

import difflib
import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .errors import DomainError, invalid_input


class StrictSerializer(serializers.Serializer):
    """Refuses keys it does not know, so a typo ('maxOpenToken') is an
    error instead of a silently ignored setting."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {key: _not_a_field(key, list(self.fields)) for key in unknown}
                )
        return super().to_internal_value(data)


def _not_a_field(key: str, fields: list[str]) -> str:
    """'is not a field here', naming the field the client likely meant: the
    camelCase of a snake_case key ('system_prompt'), or a near spelling."""
    camel = re.sub(r"_([a-z0-9])", lambda letter: letter.group(1).upper(), str(key))
    near = [camel] if camel in fields else difflib.get_close_matches(str(key), fields, n=1)
    return f"is not a field here; did you mean '{near[0]}'?" if near else "is not a field here"


class ChoiceField(serializers.ChoiceField):
    """A choice whose error names the choices."""

    default_error_messages = {"invalid_choice": '"{input}" is not a valid choice; the choices are {choices}.'}

    def fail(self, key, **kwargs):
        if key == "invalid_choice":
            kwargs["choices"] = ", ".join(f'"{choice}"' for choice in self.choices)
        super().fail(key, **kwargs)


class StrictCharField(serializers.CharField):
    """A JSON string, and only that (DRF would turn 0 into "0")."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A JSON true or false, and only that (DRF would take 0, 1, "yes")."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            raise serializers.ValidationError("must be true or false")
        return data


@extend_schema_field({"type": "string", "pattern": r"^-?\d{1,12}(\.\d{1,6})?$", "example": "250.000000"})
class CreditsField(serializers.DecimalField):
    """Credits as a decimal string with up to six places, e.g. "250.000000"."""

    def __init__(self, **kwargs):
        super().__init__(max_digits=18, decimal_places=6, **kwargs)

    def validate_empty_values(self, data):
        if data == "":  # DRF would read "" as null for a nullable field
            raise serializers.ValidationError('must be a decimal string, like "250.000000"')
        return super().validate_empty_values(data)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError('must be a decimal string, like "250.000000"')
        return super().to_internal_value(data)


@extend_schema_field(
    {"type": "string", "pattern": r"^-?(?=[0.]*[1-9])\d{1,12}(\.\d{1,6})?$", "example": "250.000000"}
)
class NonZeroCreditsField(CreditsField):
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if value == 0:
            raise serializers.ValidationError("must not be zero")
        return value


def valid(serializer: serializers.Serializer, code: str = "invalid_request"):
    """The serializer, validated — or a 400 in the API's error shape, with `code`."""
    if not serializer.is_valid():
        raise invalid_input(serializer.errors, code=code)
    return serializer


def query(serializer_class, request) -> dict:
    """The validated query string; a parameter it does not know is a 400
    (a typo like `?limt=5` would otherwise be silently ignored)."""
    data = request.query_params.dict()
    unknown = sorted(set(data) - set(serializer_class().fields))
    if unknown:
        raise DomainError(
            f"Unknown query parameter(s): {', '.join(repr(k) for k in unknown)}.",
            details=[{"field": k, "message": "is not a query parameter here"} for k in unknown],
        )
    return valid(serializer_class(data=data)).validated_data


def strict_request_bodies(result, generator, request, public):
    """drf-spectacular hook: request bodies are closed (StrictSerializer
    refuses unknown keys), and the schema says so."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and component.get("type") == "object":
            component["additionalProperties"] = False
    return result


@extend_schema_field({"type": "string", "pattern": r"^\d{1,12}(\.\d{1,6})?$", "example": "50.000000"})
class UnsignedCreditsField(CreditsField):
    def __init__(self, **kwargs):
        super().__init__(min_value=0, **kwargs)
