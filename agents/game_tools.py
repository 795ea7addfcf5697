"""Tools the game runs: a definition's `tools`, each `{name, description,
parameters, timeoutSeconds?}` — `parameters` a JSON Schema object, as both
providers take it. The model calls one like a memory tool; the turn then
waits for the game to answer (`agents.sending.waits`).

Checked here when an agent is defined, in the studio's words: names
unique, none a memory tool's, a bounded count and size, the schema itself
well formed (JSON Schema's own meta-schema), a timeout within bounds.
"""

import json
import re

from django.conf import settings

from agents.providers.base import UnparsedArguments
from memories.tools import MEMORY_TOOLS
from studio.errors import DomainError

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DESCRIPTION_MAX_CHARS = 1024
# A tool's whole definition, as JSON; parameters nested at most this deep.
TOOL_MAX_BYTES = 16 * 1024
PARAMETERS_MAX_DEPTH = 16
# Names the studio gives tools of its own (the compactor's, on Anthropic).
RESERVED = (*MEMORY_TOOLS, "write_checkpoint")
FIELDS = ("name", "description", "parameters", "timeoutSeconds")


def tools_check(tools) -> list[dict]:
    """The definition's `tools`, checked: each as it is kept (a dict of
    name, description, parameters and, when given, timeoutSeconds)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise _refused("'tools' is a list of {name, description, parameters} objects.")
    most = settings.STUDIO["MAX_GAME_TOOLS"]
    if len(tools) > most:
        raise _refused(
            f"'tools' has {len(tools)} tools; an agent has at most {most} (STUDIO_MAX_GAME_TOOLS)."
        )
    kept, names = [], set()
    for index, tool in enumerate(tools):
        checked = _tool_check(tool, f"tools[{index}]")
        if checked["name"] in names:
            raise _refused(f"tools[{index}].name: two tools are named '{checked['name']}'.")
        names.add(checked["name"])
        kept.append(checked)
    return kept


def _tool_check(tool, where: str) -> dict:
    if not isinstance(tool, dict):
        raise _refused(f"{where}: a tool is an object with a name, a description and parameters.")
    unknown = [key for key in tool if key not in FIELDS]
    if unknown:
        raise _refused(f"{where}: '{str(unknown[0])[:64]}' is not a field of a tool ({', '.join(FIELDS)}).")
    name = tool.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise _refused(f"{where}.name: 1–64 characters from A–Z, a–z, 0–9, '_' and '-', like 'give_item'.")
    if name in RESERVED:
        raise _refused(f"{where}.name: '{name}' is the studio's own tool; name the game's tool otherwise.")
    description = tool.get("description")
    if (
        not isinstance(description, str)
        or not description.strip()
        or len(description) > DESCRIPTION_MAX_CHARS
    ):
        raise _refused(
            f"{where}.description: what the tool does and when to call it, 1–{DESCRIPTION_MAX_CHARS:,} "
            "characters: the model reads it."
        )
    parameters = tool.get("parameters", {"type": "object", "properties": {}})
    _parameters_check(parameters, f"{where}.parameters")
    kept = {"name": name, "description": description, "parameters": parameters}
    if "timeoutSeconds" in tool:
        kept["timeoutSeconds"] = _timeout_check(tool["timeoutSeconds"], f"{where}.timeoutSeconds")
    if len(json.dumps(kept, ensure_ascii=False).encode()) > TOOL_MAX_BYTES:
        raise _refused(f"{where}: a tool's definition is at most {TOOL_MAX_BYTES:,} bytes as JSON.")
    return kept


def _parameters_check(parameters, where: str) -> None:
    import jsonschema

    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise _refused(
            f'{where}: a JSON Schema of an object, like {{"type": "object", "properties": {{…}}}}.'
        )
    if _depth(parameters) > PARAMETERS_MAX_DEPTH:
        raise _refused(f"{where}: nested deeper than {PARAMETERS_MAX_DEPTH} levels.")
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as error:
        at = "/".join(str(part) for part in error.path)
        raise _refused(
            f"{where}{'/' + at if at else ''}: not a valid JSON Schema: {error.message[:200]}"
        ) from None


def _depth(value) -> int:
    """How deep `value` nests, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > PARAMETERS_MAX_DEPTH:
            return depth
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _timeout_check(value, where: str) -> int:
    most = settings.STUDIO["MAX_TOOL_TIMEOUT_SECONDS"]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise _refused(f"{where}: whole seconds from 1 to {most:,} (STUDIO_MAX_TOOL_TIMEOUT_SECONDS).")
    return value


def _refused(message: str) -> DomainError:
    return DomainError(message, code="invalid_definition", details=[{"field": "tools", "message": message}])


def tool_timeout(tools: list[dict], name: str) -> int:
    """How long the game has to answer a call of tool `name`."""
    for tool in tools:
        if tool["name"] == name:
            return tool.get("timeoutSeconds") or settings.STUDIO["TOOL_TIMEOUT_SECONDS"]
    return settings.STUDIO["TOOL_TIMEOUT_SECONDS"]


def tool_names(tools: list[dict]) -> list[str]:
    return [tool["name"] for tool in tools]


def arguments_refusal(name: str, arguments) -> str | None:
    """Why a call of game tool `name` is not handed to the game, as an
    error the model reads: arguments the studio could not read (not JSON,
    too deep, too large) or that are not an object. None when they are an
    object — the game checks them against its own parameters."""
    if isinstance(arguments, UnparsedArguments):
        return (
            f"The arguments for {name} {arguments.reason}: the game was not asked. Send an object, "
            "as the tool's parameters describe."
        )
    if not isinstance(arguments, dict):
        return f"{name} takes an object of arguments, as its parameters describe: the game was not asked."
    return None
