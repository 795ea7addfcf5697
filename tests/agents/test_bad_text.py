"""Bad text is never a 500: characters the database refuses, sent by a model
or by a person."""

import json

import pytest
from django.db import connection

from agents.models import Turn, TurnStatus
from agents.sending import engine
from billing import ledger
from billing.models import CostLine
from memories.models import Memory

from ..conftest import call, error_of, script

NUL = "\u0000"


def test_a_nul_in_the_models_reply_is_stored_as_a_replacement_character(api, agent, send):
    turn = send(script({"say": f"x{NUL}y"}))

    assert (turn["status"], turn["reply"]) == ("completed", "x\ufffdy")
    assert turn["cost"]["lines"][0]["kind"] == "model"
    history = api.get("/api/v1/agents/dm/history").json()["blocks"]
    assert history[0]["entries"][-1]["content"] == "x\ufffdy"


def test_a_nul_in_tool_arguments_is_stored_as_a_replacement_character(agent, send):
    turn = send(script(call("close_memory", name=f"qu{NUL}est", description=f"d{NUL}", content=f"a{NUL}b")))

    assert turn["status"] == "completed"
    assert turn["toolCalls"][0]["isError"] is False
    memory = Memory.objects.get(agent=agent)
    assert (memory.name, memory.description, memory.content) == ("qu\ufffdest", "d\ufffd", "a\ufffdb")
    assert {line["kind"] for line in turn["cost"]["lines"]} == {"model", "memory_access"}


def test_a_lone_surrogate_from_the_model_is_stored_as_a_replacement_character(agent, send):
    turn = send(json.dumps({"script": [{"say": "half \ud83d of an emoji"}]}))

    assert turn["reply"] == "half \ufffd of an emoji"


def test_a_page_send_with_a_nul_is_400(designer, agent):
    response = designer.post("/studio/ashmere/agents/dm/send/", {"content": f"hello{NUL}"})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"
    assert not Turn.objects.exists()


def test_an_api_send_with_a_nul_is_400(api, agent):
    response = api.post("/api/v1/agents/dm/messages", {"content": f"hello{NUL}"}, format="json")

    assert response.status_code == 400
    assert not Turn.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite stores a NUL")
@pytest.mark.parametrize(
    "steps",
    [
        [{"say": f"x{NUL}y"}],
        [call("close_memory", name="quest", description="d", content=f"a{NUL}b"), {"say": "never"}],
    ],
    ids=["in the reply", "in a tool call"],
)
def test_a_database_error_mid_turn_ends_it_failed_and_still_charges_what_was_spent(
    agent, send, game, monkeypatch, steps
):
    # Let the NUL through to PostgreSQL as it would without the replacement.
    monkeypatch.setattr(engine, "storable_json", lambda value: value)
    monkeypatch.setattr(engine, "storable", lambda text: text)

    turn = send(script(*steps))

    assert (turn["status"], turn["errorCode"]) == ("failed", "unstorable_output")
    assert CostLine.objects.get(turn_id=turn["id"], kind="model").quantity > 0
    assert Turn.objects.get().status == TurnStatus.FAILED
    assert all(check.is_consistent for check in ledger.ledger_check())
