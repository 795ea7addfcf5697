"""The definition's schema as the clients ship it, so they check an
agent's options — names and JSON types — when it is constructed, as the
studio will check them: the studio's `AgentDefinitionRequest` (its OpenAPI
schema, `/api/v1/schema/`) with its references inlined and its prose left
out. `manage.py definitionschema` writes it into each client
(CLIENT_FILES); tests/clients/test_definition_schema.py keeps them equal
to what the studio serves."""

import json

from django.conf import settings

# The request body of `PUT /agents/{name}` in the OpenAPI schema.
DEFINITION = "AgentDefinitionRequest"
# Where each client keeps its copy, from the repository's root.
CLIENT_FILES = (
    "clients/js/lib/definition-schema.json",
    "clients/python/studio_client/definition-schema.json",
)
# What the clients read of a schema (prose, examples and the like left out).
KEPT = {
    "type",
    "properties",
    "additionalProperties",
    "required",
    "items",
    "enum",
    "nullable",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
}
NOTE = (
    "The studio's agent definition (PUT /api/v1/agents/{name}), from its OpenAPI schema's "
    f"{DEFINITION}: written by `manage.py definitionschema`, kept equal to the studio's by "
    "tests/clients/test_definition_schema.py. Do not edit by hand."
)


def definition_schema(openapi: dict) -> dict:
    """The clients' schema of a definition, from the studio's OpenAPI schema."""
    components = openapi["components"]["schemas"]
    return {"$comment": NOTE, **_inlined(components[DEFINITION], components)}


def _inlined(schema: dict, components: dict) -> dict:
    """`schema` with each `$ref` (alone or as allOf's one item) replaced by
    what it names, and only the KEPT keys."""
    if "$ref" in schema:
        schema = {**components[schema["$ref"].rsplit("/", 1)[1]], **_without(schema, "$ref")}
    if len(schema.get("allOf", ())) == 1:
        schema = {**_inlined(schema["allOf"][0], components), **_without(schema, "allOf")}
    out = {}
    for key, value in schema.items():
        if key not in KEPT:
            continue
        if key == "properties":
            value = {name: _inlined(field, components) for name, field in value.items()}
        elif key == "items":
            value = _inlined(value, components)
        out[key] = value
    return out


def _without(schema: dict, key: str) -> dict:
    return {k: v for k, v in schema.items() if k != key}


def client_file_text(schema: dict) -> str:
    """A client's file, byte for byte: what a change to the studio's
    definition shows as a readable diff."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def client_paths():
    return [settings.BASE_DIR / path for path in CLIENT_FILES]
