"""The API documents itself: the OpenAPI schema and the interactive docs."""

import pytest
from django.core.management import call_command

from ..conftest import error_of


@pytest.mark.django_db
def test_the_schema_lists_every_endpoint_with_the_bearer_key(client):
    response = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    schema = response.json()
    assert {
        "/api/v1/agents",
        "/api/v1/agents/{name}",
        "/api/v1/agents/{name}/messages",
        "/api/v1/agents/{name}/turns/{turn_id}/cancel",
        "/api/v1/agents/{name}/history",
        "/api/v1/agents/{name}/context",
        "/api/v1/agents/{name}/checkpoint",
        "/api/v1/agents/{name}/memories",
        "/api/v1/billing",
        "/api/v1/billing/lines",
        "/api/v1/billing/adjustments",
    } <= set(schema["paths"])
    assert schema["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    send = schema["paths"]["/api/v1/agents/{name}/messages"]["post"]
    assert {"200", "400", "401", "402", "404"} <= set(send["responses"])


@pytest.mark.django_db
def test_the_schema_documents_the_replay_routes(client):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()

    replays = schema["paths"]["/api/v1/agents/{name}/replays"]
    one = schema["paths"]["/api/v1/agents/{name}/replays/{replay_id}"]
    cancel = schema["paths"]["/api/v1/agents/{name}/replays/{replay_id}/cancel"]
    assert set(replays) == {"get", "post"} and set(one) == {"get", "delete"} and set(cancel) == {"post"}
    assert {"204", "404", "409"} <= set(one["delete"]["responses"])
    assert {"202", "400", "401", "402", "404", "409", "429"} <= set(replays["post"]["responses"])
    assert {"202", "404", "409"} <= set(cancel["post"]["responses"])
    body = schema["components"]["schemas"]["ReplayRequest"]
    assert set(body["properties"]) == {"fromBlock", "through", "definition"}
    assert body["required"] == ["fromBlock"]
    detail = schema["components"]["schemas"]["ReplayDetailOut"]["properties"]
    assert {"status", "progress", "definition", "rows", "memories", "cost", "replayAgent"} <= set(detail)
    assert "memoriesAt" in [p["name"] for p in one["get"]["parameters"]]


@pytest.mark.django_db
def test_the_schema_documents_the_game_and_its_default_model(client):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()

    game = schema["paths"]["/api/v1/game"]
    assert set(game) == {"get", "patch"}
    assert {"200", "401"} <= set(game["get"]["responses"])
    assert {"200", "400", "401", "403"} <= set(game["patch"]["responses"])
    body = game["patch"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    request = schema["components"]["schemas"][body]
    assert request["additionalProperties"] is False
    assert request["properties"]["defaultModel"]["nullable"] is True
    out = game["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert set(schema["components"]["schemas"][out]["properties"]) == {
        "slug",
        "name",
        "defaultModel",
        "studioDefaultModel",
        "effectiveDefaultModel",
    }
    definition = schema["components"]["schemas"]["AgentDefinitionRequest"]["properties"]["model"]
    assert "default" not in definition
    assert "game's default" in definition["description"]


def test_the_schema_generates_without_warnings(capsys, tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))


@pytest.mark.django_db
def test_the_interactive_docs_page_is_served(client):
    response = client.get("/api/v1/docs/")

    assert response.status_code == 200
    assert b"swagger" in response.content.lower()


@pytest.mark.django_db
def test_an_unknown_api_path_is_a_json_404(client):
    response = client.get("/api/v1/nothing-here")

    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def _component(schema: dict, reference: dict) -> dict:
    return schema["components"]["schemas"][reference["$ref"].rsplit("/", 1)[-1]]


def test_the_schema_states_what_an_agent_file_and_a_send_accept(client):
    """A client generated from the schema sends only what the studio takes:
    the file's fixed format and version, a bounded Idempotency-Key, an agent
    name of the allowed characters."""
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()

    agent_file = schema["components"]["schemas"]["AgentFileRequest"]["properties"]
    assert _component(schema, agent_file["format"]["allOf"][0])["enum"] == ["studio.agent"]
    assert _component(schema, agent_file["version"]["allOf"][0])["enum"] == [1]
    send = schema["paths"]["/api/v1/agents/{name}/messages"]["post"]
    header = next(p for p in send["parameters"] if p["name"] == "Idempotency-Key")
    assert header["schema"] == {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"}
    define = schema["paths"]["/api/v1/agents/{name}"]["put"]
    name = next(p for p in define["parameters"] if p["name"] == "name")
    assert name["schema"]["pattern"] == "^[A-Za-z0-9_-]{1,64}$"


def test_each_server_sent_events_answer_names_its_events_and_their_fields(client):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()

    for path, method in [
        ("/api/v1/agents/{name}/messages", "post"),
        ("/api/v1/agents/{name}/turns/{turn_id}/events", "get"),
    ]:
        stream = schema["paths"][path][method]["responses"]["200"]["content"]["text/event-stream"]["schema"]
        assert set(stream["x-events"]) == {
            "turn.started",
            "tool_call",
            "tool.requested",
            "tool.answered",
            "memory.changed",
            "reply.delta",
            "turn.finished",
            "error",
        }, path
    finished = schema["components"]["schemas"]["EventTurnFinished"]
    assert {"turnId", "status", "reply", "turn", "seq"} <= set(finished["required"])
    assert finished["properties"]["status"]["enum"] == ["completed", "cancelled", "failed"]


def test_the_readme_lists_every_field_of_the_definition_with_its_default():
    from pathlib import Path

    from agents.api.serializers import AgentDefinitionSerializer

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme[readme.index("| field | default | what it takes |") :].split("\n\n")[0]

    assert [line.split("`")[1] for line in table.splitlines()[2:]] == list(AgentDefinitionSerializer().fields)
    assert "sliding-window" in table and "4,000" in table and "32000" in table
