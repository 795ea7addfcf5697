"""POST /api/v1/agents/{name}/messages, and reading and cancelling turns."""

import re
import uuid
from decimal import Decimal
from urllib.parse import urlencode

import pytest

from agents.models import Block, Turn
from agents.providers.scripted import sleep_max_seconds
from agents.services import AgentDefinition, agent_define
from billing import ledger
from billing.models import CostLine
from memories.models import Memory
from tests.conftest import call, error_of, script

MESSAGES = "/api/v1/agents/dm/messages"
SIX_PLACES = re.compile(r"^-?\d+\.\d{6}$")

QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the silver key."}


# --- the happy path -------------------------------------------------------------------


def test_a_send_returns_the_ended_turn_in_its_documented_shape(agent, send):
    turn = send(script(call("close_memory", **QUEST), {"say": "Noted."}))

    assert uuid.UUID(turn["id"])
    assert turn["status"] == "completed"
    assert turn["transient"] is False
    assert turn["block"] == 1
    assert turn["reply"] == "Noted."
    assert "error" not in turn
    assert turn["toolCalls"] == [
        {
            "name": "close_memory",
            "arguments": QUEST,
            "result": "Created memory 'quest' and saved it closed. open_memory reads it when you need it.",
            "isError": False,
        }
    ]


def test_a_turns_cost_has_a_line_per_kind_in_six_place_decimals(agent, send):
    turn = send(script(call("close_memory", **QUEST), {"say": "Noted."}))

    cost = turn["cost"]
    lines = {line["kind"]: line for line in cost["lines"]}
    assert set(lines) == {"model", "memory_access"}
    assert lines["model"]["label"] == "Model"
    assert lines["model"]["quantity"] > 0
    assert lines["memory_access"] == {
        "kind": "memory_access",
        "label": "Memory access",
        "quantity": 1,
        "amount": "0.001000",
    }
    assert all(SIX_PLACES.match(line["amount"]) for line in cost["lines"])
    assert SIX_PLACES.match(cost["total"])
    assert Decimal(cost["total"]) == sum(Decimal(line["amount"]) for line in cost["lines"])
    assert Decimal(lines["model"]["amount"]) > 0


def test_a_plain_message_gets_a_reply_quoting_it(agent, send):
    turn = send("I open the chapel door.")

    assert turn["status"] == "completed"
    assert turn["reply"] == 'You said: "I open the chapel door."'
    assert turn["toolCalls"] == []
    assert [line["kind"] for line in turn["cost"]["lines"]] == ["model"]


def test_each_send_takes_the_next_block(agent, send):
    blocks = [send(f"Message {n}")["block"] for n in range(3)]

    assert blocks == [1, 2, 3]


def test_a_send_keeps_the_block_with_the_message_calls_and_reply(agent, send):
    send(script(call("close_memory", **QUEST), {"say": "Noted."}))

    block = Block.objects.get(agent=agent, number=1)
    assert [e["type"] for e in block.entries] == ["message", "tool_call", "message"]
    assert block.status == "completed"
    assert block.tokens > 0
    assert Memory.objects.get(agent=agent, name="quest").content == "Find the silver key."


def test_tool_errors_are_results_and_the_turn_goes_on(agent, send):
    turn = send(script(call("open_memory", name="inventory"), {"say": "Nothing there."}))

    assert turn["status"] == "completed"
    assert turn["reply"] == "Nothing there."
    assert turn["toolCalls"][0]["isError"] is True
    assert "no memory named 'inventory'" in turn["toolCalls"][0]["result"]


# --- transient sends --------------------------------------------------------------------


def test_a_transient_send_leaves_no_trace(api, agent, send):
    send("Earlier message")
    history = api.get("/api/v1/agents/dm/history").json()
    context = api.get("/api/v1/agents/dm/context").json()

    turn = send(script(call("close_memory", **QUEST), {"say": "Just a peek."}), transient=True)

    assert turn["status"] == "completed"
    assert turn["transient"] is True
    assert turn["block"] is None
    assert turn["reply"] == "Just a peek."
    assert turn["toolCalls"] == []
    assert api.get("/api/v1/agents/dm/history").json() == history
    assert api.get("/api/v1/agents/dm/context").json() == context
    assert not Memory.objects.filter(agent=agent).exists()
    assert [line["kind"] for line in turn["cost"]["lines"]] == ["model"]


def test_a_transient_send_does_not_move_the_block_count(api, agent, send):
    send("One", transient=True)

    turn = send("Two")

    assert turn["block"] == 1
    assert api.get("/api/v1/agents/dm").json()["stats"]["blocks"] == 1


def test_a_transient_send_is_still_billed(agent, send, game):
    before = ledger.balance(game)

    turn = send("Just asking", transient=True)

    assert Decimal(turn["cost"]["total"]) > 0
    assert ledger.balance(game) == before - Decimal(turn["cost"]["total"])


# --- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"content": ""},
        {"content": "   \n "},
        {"content": None},
        {"content": "Hi", "transient": "perhaps"},
        {"content": "Hi", "role": "system"},
    ],
    ids=["missing", "empty", "blank", "null", "bad-transient", "unknown-key"],
)
def test_a_send_without_proper_content_is_400_and_runs_nothing(api, agent, body):
    response = api.post(MESSAGES, body, format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"
    assert not Turn.objects.exists()
    assert not CostLine.objects.exists()


def test_a_send_to_an_unknown_agent_is_404(api):
    response = api.post("/api/v1/agents/nobody/messages", {"content": "Hello"}, format="json")

    assert response.status_code == 404
    assert error_of(response)["code"] == "agent_not_found"


def test_a_send_to_another_games_agent_is_404(outsider, agent):
    response = outsider.post(MESSAGES, {"content": "Hello"}, format="json")

    assert response.status_code == 404
    assert error_of(response)["code"] == "agent_not_found"
    assert not Turn.objects.exists()


def test_a_send_needs_a_key(anonymous, agent):
    response = anonymous.post(MESSAGES, {"content": "Hello"}, format="json")

    assert response.status_code == 401
    assert not Turn.objects.exists()


def test_a_send_when_the_game_has_no_credits_is_402(api, agent, game):
    ledger.adjustment_post(game=game, amount=-100, reason="spent", made_by="test")

    response = api.post(MESSAGES, {"content": "Hello"}, format="json")

    assert response.status_code == 402
    assert error_of(response)["code"] == "budget_exhausted"
    assert not Turn.objects.exists()


def test_get_on_messages_is_405(api, agent):
    response = api.get(MESSAGES)

    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


# --- reading and cancelling a turn -------------------------------------------------------


def test_get_turn_returns_the_same_turn_object(api, agent, send):
    turn = send(script(call("close_memory", **QUEST), {"say": "Noted."}))

    response = api.get(f"/api/v1/agents/dm/turns/{turn['id']}")

    assert response.status_code == 200
    fetched = response.json()["turn"]
    assert {k: v for k, v in fetched.items() if k != "endedAt"} == {
        k: v for k, v in turn.items() if k != "endedAt"
    }
    assert fetched["endedAt"] is not None


def test_get_turn_returns_exactly_what_the_send_returned(api, agent, send):
    turn = send("Hello")

    response = api.get(f"/api/v1/agents/dm/turns/{turn['id']}")

    assert response.json() == {"turn": turn}


def test_the_turn_list_shows_each_turn_as_a_send_returned_it_newest_first(api, agent, send):
    first = send(script(call("close_memory", **QUEST), {"say": "Noted."}))
    second = send("Hello", transient=True)
    third = send(script(call("open_memory", name="quest"), {"say": "Found it."}))

    body = api.get("/api/v1/agents/dm/turns").json()

    assert body == {"turns": [third, second, first], "nextCursor": None}


def test_the_turn_list_filters_by_status(api, agent, send):
    send("Hello")
    Turn.objects.create(agent=agent, status="failed", error="It broke.", error_code="model_error")

    turns = api.get("/api/v1/agents/dm/turns?status=failed&limit=1").json()

    assert [(t["status"], t["errorCode"]) for t in turns["turns"]] == [("failed", "model_error")]
    assert turns["nextCursor"] is None


def keyed_send(api, content: str, key: str, name: str = "dm") -> dict:
    response = api.post(
        f"/api/v1/agents/{name}/messages", {"content": content}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    assert response.status_code == 200, response.content
    return response.json()["turn"]


def test_the_turn_list_finds_a_send_by_its_idempotency_key(api, agent, send):
    send("Before.")
    sent = keyed_send(api, "I open the chapel door.", "door-7f3a")
    send("After.")

    found = api.get("/api/v1/agents/dm/turns?idempotencyKey=door-7f3a").json()

    assert found == {"turns": [sent], "nextCursor": None}
    assert sent["block"] == 2  # the block game code reconciles with


def test_an_idempotency_key_no_send_used_finds_no_turn(api, agent, send):
    keyed_send(api, "Hello", "hello-1")

    for key in ("hello-2", "HELLO-1", "hello-1 "):
        assert api.get("/api/v1/agents/dm/turns?" + urlencode({"idempotencyKey": key})).json()["turns"] == []


def test_an_idempotency_key_finds_only_its_own_agents_and_games_turn(api, define, game, other_game, outsider):
    define("dm")
    define("innkeeper")
    keyed_send(api, "Hello", "shared-key")
    agent_define(
        game=other_game, name="dm", definition=AgentDefinition(memory_enabled=True), by=None, via="api"
    )

    assert api.get("/api/v1/agents/innkeeper/turns?idempotencyKey=shared-key").json()["turns"] == []
    assert outsider.get("/api/v1/agents/dm/turns?idempotencyKey=shared-key").json()["turns"] == []
    assert len(api.get("/api/v1/agents/dm/turns?idempotencyKey=shared-key").json()["turns"]) == 1


@pytest.mark.parametrize("key", ["", "k" * 201, "door\x00"])
def test_an_idempotency_key_past_its_bounds_is_refused_by_name(api, agent, key):
    response = api.get("/api/v1/agents/dm/turns?" + urlencode({"idempotencyKey": key}))

    assert response.status_code == 400
    assert [d["field"] for d in error_of(response)["details"]] == ["idempotencyKey"]


# Ids are fixed, not drawn per run: pytest-xdist's workers must each collect the same tests.
@pytest.mark.parametrize("turn_id", ["not-a-uuid", "5b0e4c1f-9a7d-4e2b-8c6f-3d1a2b4c6e80", "1"])
def test_get_turn_with_an_unknown_id_is_404(api, agent, turn_id):
    response = api.get(f"/api/v1/agents/dm/turns/{turn_id}")

    assert response.status_code == 404
    assert error_of(response)["code"] == "turn_not_found"


def test_a_turn_is_only_found_under_its_own_agent(api, define, send):
    define("dm")
    define("innkeeper")
    turn = send("Hello", name="dm")

    response = api.get(f"/api/v1/agents/innkeeper/turns/{turn['id']}")

    assert response.status_code == 404


def test_another_games_turn_is_404(outsider, agent, send):
    turn = send("Hello")

    response = outsider.get(f"/api/v1/agents/dm/turns/{turn['id']}")

    assert response.status_code == 404


def test_cancelling_an_ended_turn_is_409(api, agent, send):
    turn = send("Hello")

    response = api.post(f"/api/v1/agents/dm/turns/{turn['id']}/cancel")

    assert response.status_code == 409
    assert error_of(response)["code"] == "turn_ended"
    assert Turn.objects.get(uuid=turn["id"]).status == "completed"


def test_cancelling_an_unknown_turn_is_404(api, agent):
    response = api.post(f"/api/v1/agents/dm/turns/{uuid.uuid4()}/cancel")

    assert response.status_code == 404


# --- failures and limits -------------------------------------------------------------------


def test_a_failed_model_call_ends_the_turn_failed_keeping_what_it_did(api, agent, send):
    turn = send(script(call("close_memory", **QUEST), {"fail": "boom"}, {"say": "never said"}))

    assert turn["status"] == "failed"
    assert "boom" in turn["error"]
    assert turn["reply"] == ""
    assert [c["name"] for c in turn["toolCalls"]] == ["close_memory"]
    block = api.get("/api/v1/agents/dm/history").json()["blocks"][0]
    assert block["status"] == "failed"
    assert [e["type"] for e in block["entries"]] == ["message", "tool_call"]
    assert Memory.objects.get(agent=agent, name="quest").content == "Find the silver key."


def test_a_failed_turn_is_still_billed_for_what_it_used(agent, send):
    turn = send(script(call("close_memory", **QUEST), {"fail": "boom"}))

    kinds = {line["kind"]: line["quantity"] for line in turn["cost"]["lines"]}
    assert kinds["memory_access"] == 1
    assert kinds["model"] > 0


def test_after_a_failed_turn_the_agent_takes_the_next_send(agent, send):
    send(script({"fail": "boom"}))

    turn = send("Still there?")

    assert turn["status"] == "completed"
    assert turn["block"] == 2


def test_a_scripted_agent_fails_its_turns_saying_why_once_the_setting_is_off(api, agent, send, studio_conf):
    studio_conf(ALLOW_SCRIPTED_MODEL=False)

    turn = send("Are you still there?")

    assert turn["status"] == "failed"
    assert turn["error"] == (
        "The model call failed: this agent uses the test model 'scripted', which this studio no longer "
        "offers (STUDIO_ALLOW_SCRIPTED_MODEL is off); redefine the agent with 'openai:<model>' or "
        "'anthropic:<model>'"
    )
    assert api.get("/api/v1/agents/dm/history").json()["blocks"][0]["status"] == "failed"
    assert ledger.balance(agent.game) == Decimal(100)


@pytest.mark.parametrize(
    ("value", "shown"), [("abc", '"abc"'), (-1, "-1"), (float("nan"), "NaN"), ([5], "[5]")]
)
def test_a_sleep_step_that_is_not_a_number_of_seconds_fails_the_turn_saying_so(agent, send, value, shown):
    turn = send(script(call("close_memory", **QUEST), {"sleep": value}, {"say": "never said"}))

    assert turn["status"] == "failed"
    assert turn["error"] == (
        "The model call failed: the script's sleep step needs a number of seconds from 0 up "
        f"(it waits {sleep_max_seconds():g} s at most), not {shown}"
    )
    assert [c["name"] for c in turn["toolCalls"]] == ["close_memory"]
    assert send("Still there?")["status"] == "completed"


def test_a_turn_past_max_model_steps_is_asked_once_more_with_no_tools_and_replies(agent, send, studio_conf):
    studio_conf(MAX_MODEL_STEPS=2)
    turn = send(
        script(
            call("close_memory", name="a", description="A", content="one"),
            call("close_memory", name="b", description="B", content="two"),
            call("close_memory", name="c", description="C", content="three"),
            {"say": "done"},
        )
    )

    assert (turn["status"], turn["reply"]) == ("completed", "done")
    assert turn["cutShort"]["code"] == "too_many_steps"
    assert "made 2 calls without replying" in turn["cutShort"]["message"]
    assert "error" not in turn and "errorCode" not in turn
    assert [c["arguments"]["name"] for c in turn["toolCalls"]] == ["a", "b"]
    assert not Memory.objects.filter(agent=agent, name="c").exists()
    # Two steps, and the one more call with no tools: each charged.
    model = CostLine.objects.get(turn_id=turn["id"], kind="model")
    assert model.detail["calls"] == 3


def test_a_turn_that_replies_within_max_model_steps_completes(agent, send, studio_conf):
    studio_conf(MAX_MODEL_STEPS=2)
    turn = send(script(call("close_memory", **QUEST), {"say": "done"}))

    assert turn["status"] == "completed"
    assert turn["reply"] == "done"


def test_a_memory_tool_call_to_an_agent_with_memory_off_is_skipped(define, send):
    agent = define("dm", memory_enabled=False)

    turn = send(script(call("close_memory", **QUEST)))

    assert turn["status"] == "completed"
    assert turn["reply"] == "ok"
    assert turn["toolCalls"] == []
    assert not Memory.objects.filter(agent=agent).exists()
    assert [line["kind"] for line in turn["cost"]["lines"]] == ["model"]


def test_content_over_the_limit_is_413(api, agent):
    from agents.sending.engine import CONTENT_MAX_CHARS

    response = api.post(
        "/api/v1/agents/dm/messages", {"content": "x" * (CONTENT_MAX_CHARS + 1)}, format="json"
    )

    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"
