"""Tools the game runs: defined with the agent, called by the model, the
turn waiting — in the database, in no process — for the game's answer
(or the call's deadline), then going on. Through the API, on the scripted
model, with the turn going on in a thread of the process that recorded
the last answer."""

import pytest

from agents.models import Block, Turn, TurnEntry, TurnStatus
from agents.sending.engine import waits_expire
from billing.models import CostLine
from studio.events import agent_events_buffer
from tests.support.sending import turn_send

from ..conftest import call, error_of, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DM = "/api/v1/agents/dm"
GIVE = {
    "name": "give_item",
    "description": "Hand the player an item from the innkeeper's stock.",
    "parameters": {
        "type": "object",
        "properties": {"item": {"type": "string"}},
        "required": ["item"],
        "additionalProperties": False,
    },
}
LOOK = {
    "name": "look_up_purse",
    "description": "How much gold the player carries.",
    "parameters": {"type": "object"},
}
DEFINITION = {"systemPrompt": "You keep the inn.", "memory": {}, "tools": [GIVE, LOOK]}


@pytest.fixture
def innkeeper(api, game):
    response = api.put(DM, DEFINITION, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def send(api, content):
    return api.post(f"{DM}/messages", {"content": content}, format="json")


def answer(api, turn_id, call_id, **body):
    return api.post(f"{DM}/turns/{turn_id}/tool-results", {"callId": call_id, **body}, format="json")


def turn_of(api, turn_id) -> dict:
    return api.get(f"{DM}/turns/{turn_id}").json()["turn"]


def ended(api, turn_id) -> dict:
    wait_for(lambda: turn_of(api, turn_id)["status"] in ("completed", "failed", "cancelled"), timeout=30)
    return turn_of(api, turn_id)


def events_of(agent_id, turn_id, kind) -> list[dict]:
    return [e for e in agent_events_buffer(agent_id)[1] if e["type"] == kind and e.get("turnId") == turn_id]


# --- the definition ------------------------------------------------------------------------------


def test_a_definition_takes_the_games_tools_and_shows_them(api, innkeeper):
    assert innkeeper["tools"] == [GIVE, LOOK]
    again = api.put(DM, DEFINITION, format="json")
    assert again.status_code == 200 and again.json()["updatedAt"] == innkeeper["updatedAt"]  # wrote nothing
    context = api.get(f"{DM}/context").json()
    assert context["tools"] == ["open_memory", "close_memory", "delete_memory", "give_item", "look_up_purse"]
    without = api.put(DM, {**DEFINITION, "tools": []}, format="json").json()
    assert api.get(f"{DM}/context").json()["tokens"]["tools"] < context["tokens"]["tools"]
    assert without["tools"] == []


@pytest.mark.parametrize(
    "tools, said",
    [
        ([GIVE, GIVE], "two tools are named 'give_item'"),
        ([{**GIVE, "name": "open_memory"}], "the studio's own tool"),
        ([{**GIVE, "parameters": {"type": "string"}}], "a JSON Schema of an object"),
        (
            [{**GIVE, "parameters": {"type": "object", "properties": {"item": {"type": "nonsense"}}}}],
            "not a valid JSON Schema",
        ),
        ([{**GIVE, "timeoutSeconds": 0}], "timeoutSeconds"),
        ([{**GIVE, "name": "give item"}], "1–64 characters"),
    ],
)
def test_a_tool_definition_the_studio_cannot_offer_is_refused_saying_why(api, game, tools, said):
    response = api.put(DM, {**DEFINITION, "tools": tools}, format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] in ("invalid_definition", "invalid_request")
    assert said in error_of(response)["message"]


def test_too_many_tools_are_refused(api, game, studio_conf):
    studio_conf(MAX_GAME_TOOLS=1)

    response = api.put(DM, DEFINITION, format="json")

    assert response.status_code == 400 and "at most 1" in error_of(response)["message"]


# --- a turn that waits for the game -------------------------------------------------------------------


def test_a_call_of_a_game_tool_waits_for_the_games_answer_then_the_turn_goes_on(api, innkeeper, agent_row):
    sent = send(api, script(call("give_item", item="the silver key"), {"say": "Here is your key."}))

    assert sent.status_code == 202 and sent["Location"].endswith(f"/turns/{sent.json()['turn']['id']}")
    turn = sent.json()["turn"]
    assert turn["status"] == "waiting"
    [pending] = turn["pendingToolCalls"]
    assert (pending["name"], pending["arguments"]) == ("give_item", {"item": "the silver key"})
    [requested] = events_of(agent_row().pk, turn["id"], "tool.requested")
    assert requested["callId"] == pending["callId"] and requested["deadline"] == pending["deadline"]

    answered = answer(api, turn["id"], pending["callId"], result={"given": True})

    assert answered.status_code == 200
    done = ended(api, turn["id"])
    assert (done["status"], done["reply"]) == ("completed", "Here is your key.")
    [given] = done["toolCalls"]
    assert (given["name"], given["result"], given["isError"]) == ("give_item", '{"given": true}', False)
    [told] = events_of(agent_row().pk, turn["id"], "tool.answered")
    assert (told["by"], told["result"]) == ("game", '{"given": true}')
    block = Block.objects.get(turn__uuid=done["id"])
    assert [e["type"] for e in block.entries] == ["message", "tool_call", "message"]
    assert not TurnEntry.objects.exists()
    # No memory fee for the game's tools; the model's two steps charged.
    assert [line["kind"] for line in done["cost"]["lines"]] == ["model"]
    assert CostLine.objects.get(turn_id=done["id"], kind="model").detail["calls"] == 2


def test_two_calls_in_one_step_are_answered_one_by_one_in_any_order(api, innkeeper, monkeypatch):
    from agents.providers.base import ModelReply, ToolCall, Usage
    from agents.providers.scripted import ScriptedProvider

    original = ScriptedProvider.complete

    def both(self, request, control):
        if any(m["role"] == "tool" for m in request.messages):
            return original(self, request, control)
        calls = [ToolCall("c1", "give_item", {"item": "ale"}), ToolCall("c2", "look_up_purse", {})]
        return ModelReply(text=None, tool_calls=calls, usage=Usage(10, 5))

    monkeypatch.setattr(ScriptedProvider, "complete", both)
    turn = send(api, "An ale, and can I pay?").json()["turn"]
    assert [p["callId"] for p in turn["pendingToolCalls"]] == ["c1", "c2"]

    second = answer(api, turn["id"], "c2", result="12 gold")
    assert second.json()["turn"]["status"] == "waiting"
    assert [p["callId"] for p in second.json()["turn"]["pendingToolCalls"]] == ["c1"]
    answer(api, turn["id"], "c1", error="Out of ale.")

    done = ended(api, turn["id"])
    assert done["status"] == "completed"
    assert [(c["name"], c["result"], c["isError"]) for c in done["toolCalls"]] == [
        ("give_item", "Out of ale.", True),
        ("look_up_purse", "12 gold", False),
    ]


def test_answers_for_no_such_call_twice_or_after_the_end_are_refused_and_change_nothing(
    api, innkeeper, outsider
):
    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]
    call_id = turn["pendingToolCalls"][0]["callId"]

    unknown = answer(api, turn["id"], "call_nope", result="x")
    elsewhere = outsider.post(
        f"{DM}/turns/{turn['id']}/tool-results", {"callId": call_id, "result": "x"}, format="json"
    )
    neither = answer(api, turn["id"], call_id)
    first = answer(api, turn["id"], call_id, result="a map")
    ended(api, turn["id"])
    again = answer(api, turn["id"], call_id, result="another map")

    assert (unknown.status_code, error_of(unknown)["code"]) == (409, "unknown_call")
    assert error_of(neither)["message"].startswith("An answer has either")
    assert elsewhere.status_code == 404
    assert (neither.status_code, error_of(neither)["code"]) == (400, "invalid_request")
    assert first.status_code == 200
    assert (again.status_code, error_of(again)["code"]) == (409, "turn_ended")
    assert turn_of(api, turn["id"])["toolCalls"][0]["result"] == "a map"


def test_a_call_the_game_does_not_answer_in_time_gets_an_error_the_model_reads(api, game):
    api.put(DM, {**DEFINITION, "tools": [{**GIVE, "timeoutSeconds": 1}]}, format="json")

    turn = send(api, script(call("give_item", item="a lantern"), {"say": "Never mind, then."})).json()["turn"]

    done = ended(api, turn["id"])
    assert (done["status"], done["reply"]) == ("completed", "Never mind, then.")
    [unanswered] = done["toolCalls"]
    assert unanswered["isError"] and "did not answer within 1 s" in unanswered["result"]


def test_a_wait_no_process_looks_at_any_more_is_ended_by_the_sweep(api, game, monkeypatch):
    from agents.sending import engine

    monkeypatch.setattr(engine._deadlines, "add", lambda *args: None)  # as if its process had stopped
    api.put(DM, {**DEFINITION, "tools": [{**GIVE, "timeoutSeconds": 1}]}, format="json")
    turn = send(api, script(call("give_item", item="a lantern"), {"say": "Never mind."})).json()["turn"]
    wait_for(lambda: TurnEntry.objects.filter(deadline__lt=_now()).exists(), timeout=10)
    assert turn_of(api, turn["id"])["status"] == "waiting"

    assert waits_expire()

    assert ended(api, turn["id"])["reply"] == "Never mind."


def test_a_waiting_turn_can_be_cancelled_and_its_calls_say_so(api, innkeeper):
    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]

    cancelled = api.post(f"{DM}/turns/{turn['id']}/cancel")

    assert cancelled.status_code == 202
    done = turn_of(api, turn["id"])
    assert done["status"] == "cancelled"
    assert "turn ended" in done["toolCalls"][0]["result"]
    assert Turn.objects.get(uuid=turn["id"]).held == 0 or done["status"] == "cancelled"


def test_the_next_send_queues_behind_a_waiting_turn(api, innkeeper):
    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]
    later = api.post(f"{DM}/messages", {"content": "Hello?", "wait": False}, format="json").json()["turn"]

    assert turn_of(api, later["id"])["status"] == "queued"
    answer(api, turn["id"], turn["pendingToolCalls"][0]["callId"], result="ok")

    assert ended(api, later["id"])["status"] == "completed"


def test_a_transient_send_is_offered_no_game_tools(api, innkeeper):
    response = api.post(
        f"{DM}/messages",
        {"content": script(call("give_item", item="a map"), {"say": "Just words."}), "transient": True},
        format="json",
    )

    assert response.status_code == 200
    assert (response.json()["turn"]["reply"], response.json()["turn"]["toolCalls"]) == ("Just words.", [])


def _now():
    from django.utils import timezone

    return timezone.now()


@pytest.fixture
def agent_row(game):
    from agents.models import Agent

    return lambda: Agent.objects.get(game=game, name="dm")


def test_a_game_tool_called_through_the_engine_leaves_the_send_waiting(innkeeper, agent_row):
    sent = turn_send(agent=agent_row(), content=script(call("look_up_purse"), {"say": "Rich."}))

    assert sent.status == TurnStatus.WAITING


def test_a_null_result_is_a_result(api, innkeeper):
    turn = send(api, script(call("give_item", item="nothing"), {"say": "Hm."})).json()["turn"]

    answered = answer(api, turn["id"], turn["pendingToolCalls"][0]["callId"], result=None)

    assert answered.status_code == 200
    assert ended(api, turn["id"])["toolCalls"][0]["result"] == "null"
