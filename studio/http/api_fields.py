"""What every app's API uses to read input: strict bodies (unknown keys
and wrong JSON types refused, not coerced), query-string serializers that
also document their bounds in the schema, and one way to turn a validation
failure into the API's one error shape."""

import difflib
import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from studio.errors import invalid_input, problems_refused
from studio.http import params
from studio.text import lone_surrogate

# What refusing a body may cost, whatever it holds (studio/errors.py bounds
# the answer): an object names its first UNKNOWN_FIELDS_NAMED unknown keys
# and counts the rest; a "did you mean" is looked for (difflib) for the
# first UNKNOWN_FIELDS_SUGGESTED unknown keys of the whole body; and the
# body's lists stop checking their items once LIST_ITEMS_REFUSED of them
# have been refused, in the whole body.
UNKNOWN_FIELDS_NAMED = 5
UNKNOWN_FIELDS_SUGGESTED = 5
LIST_ITEMS_REFUSED = 10


class _RefusalBudget:
    """What is left, in one body's validation, of the work spent on refusing it."""

    def __init__(self):
        self.suggestions = UNKNOWN_FIELDS_SUGGESTED
        self.items_refused = LIST_ITEMS_REFUSED


def _refusal_budget(field) -> _RefusalBudget:
    """The budget of the body `field` (a serializer, however nested) is validating."""
    root = field.root
    if not hasattr(root, "_refusal_budget"):
        root._refusal_budget = _RefusalBudget()
    return root._refusal_budget


class BoundedListSerializer(serializers.ListSerializer):
    """A list of objects (`many=True`) that stops checking its items once
    the body has had LIST_ITEMS_REFUSED refused, saying where it stopped."""

    def to_internal_value(self, data):
        if not isinstance(data, list) or not self._length_allowed(data):
            return super().to_internal_value(data)  # DRF's refusal, before any item
        budget, validated, errors = _refusal_budget(self), [], {}
        for index, item in enumerate(data):
            try:
                validated.append(self.run_child_validation(item))
            except serializers.ValidationError as refused:
                errors[index] = refused.detail
                budget.items_refused -= 1
                if budget.items_refused <= 0 and index + 1 < len(data):
                    errors[api_settings.NON_FIELD_ERRORS_KEY] = [
                        f"the items after [{index}] were not checked: this body has {LIST_ITEMS_REFUSED} "
                        "refused already"
                    ]
                    break
        if errors:
            raise serializers.ValidationError(errors)
        return validated

    def _length_allowed(self, data: list) -> bool:
        return (
            (self.allow_empty or len(data) > 0)
            and (self.max_length is None or len(data) <= self.max_length)
            and (self.min_length is None or len(data) >= self.min_length)
        )


class StrictSerializer(serializers.Serializer):
    """Refuses keys it does not know, so a typo ('maxOpenToken') is an
    error instead of a silently ignored setting."""

    class Meta:
        list_serializer_class = BoundedListSerializer

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(self._unknown_refused(unknown))
        return super().to_internal_value(data)

    def _unknown_refused(self, unknown: list[str]) -> dict:
        """The first unknown keys, each with the field it likely meant while
        the body's suggestions last; the rest counted."""
        budget, fields = _refusal_budget(self), list(self.fields)
        refused = {}
        for key in unknown[:UNKNOWN_FIELDS_NAMED]:
            refused[key] = _not_a_field(key, fields, suggest=budget.suggestions > 0)
            budget.suggestions -= 1
        if len(unknown) > UNKNOWN_FIELDS_NAMED:
            more = len(unknown) - UNKNOWN_FIELDS_NAMED
            refused[api_settings.NON_FIELD_ERRORS_KEY] = [
                f"and {more:,} more key{'s' if more != 1 else ''} that {'are' if more != 1 else 'is'} "
                "not a field here"
            ]
        return refused


def _not_a_field(key: str, fields: list[str], *, suggest: bool) -> str:
    """'is not a field here', naming the field the client likely meant: the
    camelCase of a snake_case key ('system_prompt'), or a near spelling."""
    camel = re.sub(r"_([a-z0-9])", lambda letter: letter.group(1).upper(), str(key))
    near = [camel] if camel in fields else (_near_spelling(key, fields) if suggest else [])
    return f"is not a field here; did you mean '{near[0]}'?" if near else "is not a field here"


def _near_spelling(key: str, fields: list[str]) -> list[str]:
    # difflib's ratio is at most 2·len(field)/(len(field)+len(key)): a key
    # over 7/3 the longest field's length can never reach its cutoff (0.6),
    # and costs time to compare all the same.
    if 3 * len(key) > 7 * max(map(len, fields), default=0):
        return []
    return difflib.get_close_matches(key, fields, n=1)


class ChoiceField(serializers.ChoiceField):
    """A choice whose error names the choices."""

    default_error_messages = {"invalid_choice": '"{input}" is not a valid choice; the choices are {choices}.'}

    def fail(self, key, **kwargs):
        if key == "invalid_choice":
            kwargs["choices"] = ", ".join(f'"{choice}"' for choice in self.choices)
        super().fail(key, **kwargs)


def _no_lone_surrogate(value: str) -> None:
    found = lone_surrogate(value)
    if found is not None:
        raise serializers.ValidationError(
            f"must not hold a lone surrogate (U+{ord(found):X}), which is not valid Unicode text",
            code="surrogate_characters_not_allowed",
        )


class StrictCharField(serializers.CharField):
    """A JSON string, and only that (DRF would turn 0 into "0"). A lone
    surrogate is refused by one search (none for ASCII), not by DRF's own
    check, which calls `ord` on every character however long the text —
    before a message past its limit is refused as too long."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Speed: a Python call per character of every string a body holds; guarded by bench/big_bodies.py (CPU per body).
        self.validators = [
            _no_lone_surrogate if isinstance(check, ProhibitSurrogateCharactersValidator) else check
            for check in self.validators
        ]

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON number, never a string (DRF would turn "8000" into 8000, so a
    typo'd type would pass unseen); its bounds and wholeness are DRF's."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise serializers.ValidationError(
                "must be a whole number, not a string" if isinstance(data, str) else "must be a whole number"
            )
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
    data, fields = request.query_params.dict(), serializer_class().fields
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise problems_refused([{"field": k, "message": "is not a query parameter here"} for k in unknown])
    misspelt = [
        {"field": k, "message": str(fields[k].error_messages["invalid"])}
        for k in data
        if _misspelt(fields[k], data[k])
    ]
    if misspelt:
        raise problems_refused(misspelt)
    return valid(serializer_class(data=data)).validated_data


def _misspelt(field, text: str) -> bool:
    """Whether `text` is a number or a UUID written otherwise than the
    studio writes one, which DRF would read all the same (studio/http/params.py)."""
    if isinstance(field, serializers.IntegerField):
        return not params.INTEGER.fullmatch(text)
    if isinstance(field, serializers.UUIDField):
        return not params.UUID.fullmatch(text)
    return False


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
