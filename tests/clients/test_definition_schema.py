"""The schema each client checks an agent's options against when it is
constructed (clients/js/lib/definition-schema.json,
clients/python/studio_client/definition-schema.json) is the studio's own
definition, as its OpenAPI schema serves it: a field added, renamed or
retyped in agents/api/serializers.py fails here until
`manage.py definitionschema` has written it into both clients."""

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from agents.api.client_schema import CLIENT_FILES, client_file_text, definition_schema
from agents.api.serializers import AgentDefinitionSerializer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(client) -> dict:
    """The definition's schema as the studio serves it now."""
    response = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return definition_schema(response.json())


@pytest.mark.django_db
@pytest.mark.parametrize("path", CLIENT_FILES)
def test_each_clients_schema_is_the_one_the_studio_serves(served, path):
    shipped = (ROOT / path).read_text()

    assert shipped == client_file_text(served), (
        f"{path} differs from the studio's definition: run `manage.py definitionschema` and commit it"
    )


@pytest.mark.django_db
def test_the_schema_names_every_field_of_the_studios_definition_and_its_parts(served):
    definition = AgentDefinitionSerializer()

    assert set(served["properties"]) == set(definition.fields)
    for part in ("memory", "compaction"):
        assert set(served["properties"][part]["properties"]) == set(definition.fields[part].fields)
    assert set(served["properties"]["tools"]["items"]["properties"]) == set(
        definition.fields["tools"].child.fields
    )
    # What the clients check besides names: each field's JSON type.
    assert served["properties"]["compaction"]["properties"]["maxTokens"]["type"] == "integer"
    assert served["properties"]["memory"]["nullable"] is True
    assert all(part.get("additionalProperties") is False for part in _objects(served))


@pytest.mark.django_db
def test_the_command_that_writes_them_finds_them_current():
    call_command("definitionschema", check=True)


def _objects(schema: dict):
    if schema.get("type") == "object":
        yield schema
    for field in schema.get("properties", {}).values():
        yield from _objects(field)
    if "items" in schema:
        yield from _objects(schema["items"])


def test_the_files_are_json_the_clients_can_read():
    for path in CLIENT_FILES:
        assert json.loads((ROOT / path).read_text())["type"] == "object"
