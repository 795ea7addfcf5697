"""An agent's options checked when it is constructed — their names and
JSON types — against the studio's own definition schema, which this
package ships (definition-schema.json, written from the studio's OpenAPI
schema and kept equal to it by the studio's tests). A misspelt option or a
number passed as a string is refused at once, with a did-you-mean, rather
than in the background. Bounds, patterns and the rules between fields are
the studio's to check: `ready` raises its answer."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources

# What a refusal's message names at most (its details hold them all).
MESSAGE_PROBLEMS = 5


@cache
def schema() -> dict:
    return json.loads(resources.files(__package__).joinpath("definition-schema.json").read_text())


def problems_of(options: dict) -> list[dict]:
    """One `{"field", "message"}` per name the definition does not have
    and per value of the wrong JSON type. Each of `tools` that is a dict
    is checked as the studio's tool definition (its `run` is this
    client's); a `tools` of another shape is `tools_of`'s to refuse."""
    definition = schema()
    rest = {name: value for name, value in options.items() if name != "tools"}
    problems: list[dict] = []
    _object_check(rest, definition, "", problems)
    tools = options.get("tools")
    if isinstance(tools, (list, tuple)):
        item = definition["properties"]["tools"]["items"]
        for index, tool in enumerate(tools):
            if isinstance(tool, dict):
                sent = {name: value for name, value in tool.items() if name != "run"}
                _object_check(sent, item, f"tools[{index}]", problems)
    return problems


def refusal_message(agent: str, problems: list[dict]) -> str:
    sentences = [f"{p['field']}: {p['message']}" for p in problems]
    more = f"; and {len(sentences) - MESSAGE_PROBLEMS} more" if len(sentences) > MESSAGE_PROBLEMS else ""
    return f"io.Agent({agent!r}, ...): " + "; ".join(sentences[:MESSAGE_PROBLEMS]) + more


def _check(value, field: dict, path: str, problems: list[dict]) -> None:
    kind = field.get("type")
    if value is None:
        if kind and not field.get("nullable"):
            problems.append({"field": path, "message": f"must be {_EXPECTED.get(kind, 'a value')}, not None"})
        return
    if kind == "object":
        if not isinstance(value, dict):
            problems.append({"field": path, "message": f"must be a dict, not {_kind_of(value)}"})
            return
        _object_check(value, field, path, problems)
        return
    if kind == "array":
        if not isinstance(value, (list, tuple)):
            problems.append({"field": path, "message": f"must be a list, not {_kind_of(value)}"})
            return
        for index, item in enumerate(value):
            _check(item, field.get("items", {}), f"{path}[{index}]", problems)
        return
    if kind in _IS and not _IS[kind](value):
        problems.append({"field": path, "message": f"must be {_EXPECTED[kind]}, not {_kind_of(value)}"})
        return
    if "enum" in field and value not in field["enum"]:
        choices = ", ".join(f'"{choice}"' for choice in field["enum"])
        near = nearest(str(value), field["enum"])
        problems.append(
            {
                "field": path,
                "message": f'"{value}" is not a valid choice; the choices are {choices}'
                + (f'; did you mean "{near}"?' if near else "."),
            }
        )


def _object_check(value: dict, field: dict, path: str, problems: list[dict]) -> None:
    properties = field.get("properties", {})
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in properties:
            if field.get("additionalProperties") is False:
                near = nearest(str(key), list(properties)) or _nearest_within(str(key), field, path)
                problems.append(
                    {
                        "field": where,
                        "message": f"is not an option; did you mean '{near}'?"
                        if near
                        else f"is not an option; the options are {', '.join(properties)}",
                    }
                )
            continue
        _check(item, properties[key], where, problems)
    for key in field.get("required", ()):
        if key not in value:
            problems.append({"field": f"{path}.{key}" if path else key, "message": "is required"})


def _nearest_within(key: str, field: dict, path: str) -> str | None:
    """A field of one of this object's objects that `key` likely meant, by
    its path (`compaction.maxTokens`)."""
    for name, inner in field.get("properties", {}).items():
        near = inner.get("type") == "object" and nearest(key, list(inner.get("properties", {})))
        if near:
            return f"{path}.{name}.{near}" if path else f"{name}.{near}"
    return None


def nearest(key: str, names: list[str]) -> str | None:
    """The name in `names` that `key` likely meant: its camelCase (a
    snake_case key), the same name in another case, or one a character or
    two away (a letter dropped, added, changed, or two swapped); None when
    none is that close. The JavaScript client's `nearest`, line for line."""
    camel = re.sub(r"_([a-z0-9])", lambda letter: letter.group(1).upper(), key)
    if camel in names:
        return camel
    best, best_distance = None, None
    for name in names:
        distance = _edit_distance(key.lower(), name.lower())
        allowed = max(1, max(len(name), len(key)) // 4)
        if distance <= allowed and (best_distance is None or distance < best_distance):
            best, best_distance = name, distance
    return best


def _edit_distance(a: str, b: str) -> int:
    """Edits from `a` to `b`: inserts, deletes, changes, and swaps of
    neighbours (optimal string alignment)."""
    rows = [[i] + [0] * len(b) for i in range(len(a) + 1)]
    rows[0] = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            rows[i][j] = min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                rows[i][j] = min(rows[i][j], rows[i - 2][j - 2] + 1)
    return rows[len(a)][len(b)]


def _whole(value) -> bool:
    # A float with nothing after the point is a whole number in JSON, as the studio reads it.
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_IS = {
    "string": lambda value: isinstance(value, str),
    "integer": _whole,
    "boolean": lambda value: isinstance(value, bool),
}
_EXPECTED = {
    "object": "a dict",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "boolean": "True or False",
}


def _kind_of(value) -> str:
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:39] + "…"
        return f"the string {shown!r}"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a dict"
    return f"a {type(value).__name__}"
