"""The game's tools through each real provider's official SDK against its
fake on loopback: the tool offered with its JSON Schema beside the memory
tools, the model's call read (its input streamed in pieces), the turn waiting
for the game, and the game's answer sent back on the next step in the
provider's own format — a result, and an error."""

import json

import pytest

from agents.models import Block, Turn, TurnStatus
from agents.sending.engine import tool_result_post
from memories.tools import MEMORY_TOOLS
from tests.support.fake_anthropic import message, text, tool_use
from tests.support.fake_openai import completion, tool_call
from tests.support.sending import turn_send

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the turn goes on in a thread, after commit

GIVE = {
    "name": "give_item",
    "description": "Hand the player an item from the innkeeper's stock.",
    "parameters": {
        "type": "object",
        "properties": {"item": {"type": "string"}, "count": {"type": "integer", "minimum": 1}},
        "required": ["item"],
        "additionalProperties": False,
    },
    "timeoutSeconds": 600,
}
ARGUMENTS = {"item": "the silver key", "count": 1}


def innkeeper(define, model):
    return define("dm", model=model, system_prompt="You keep the inn.", tools=(GIVE,))


def answered(agent, turn: Turn, **answer) -> Turn:
    """The game's answer to the turn's one waiting call; the turn once it has ended."""
    assert turn.status == TurnStatus.WAITING, turn.error
    [call_id] = [e["id"] for e in _entries(turn) if e.get("pending")]
    tool_result_post(agent=agent, turn_id=turn.uuid, call_id=call_id, **answer)
    wait_for(lambda: Turn.objects.get(pk=turn.pk).has_ended, timeout=30)
    return Turn.objects.get(pk=turn.pk)


def _entries(turn: Turn) -> list[dict]:
    from agents.wire import turn_entries

    return turn_entries(turn)


# --- Anthropic -----------------------------------------------------------------------------------


@pytest.mark.parametrize("streamed_input", [False, True], ids=["input whole", "input streamed in pieces"])
def test_a_game_tool_through_the_anthropic_sdk(define, fake, streamed_input):
    agent = innkeeper(define, "anthropic:claude-test")
    use = (
        tool_use("give_item", id="toolu_give", json_text=json.dumps(ARGUMENTS))
        if streamed_input
        else tool_use("give_item", ARGUMENTS, id="toolu_give")
    )
    fake.push(message(text("Let me fetch it."), use), message(text("Here is your key.")))

    turn = turn_send(agent=agent, content="The key, please.")

    first = fake.bodies[0]
    assert first["stream"] is True
    assert [t["name"] for t in first["tools"]] == [*MEMORY_TOOLS, "give_item"]
    offered = first["tools"][-1]
    assert offered == {
        "name": "give_item",
        "description": GIVE["description"],
        "input_schema": GIVE["parameters"],
    }
    [pending] = [e for e in _entries(turn) if e.get("pending")]
    assert (pending["id"], pending["name"], pending["arguments"]) == ("toolu_give", "give_item", ARGUMENTS)

    done = answered(agent, turn, result={"given": "the silver key"})

    assert (done.status, Block.objects.get(turn=done).entries[-1]["content"]) == (
        TurnStatus.COMPLETED,
        "Here is your key.",
    )
    second = fake.bodies[1]["messages"]
    assert second[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me fetch it."},
            {"type": "tool_use", "id": "toolu_give", "name": "give_item", "input": ARGUMENTS},
        ],
    }
    assert second[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_give",
                "content": '{"given": "the silver key"}',
                "is_error": False,
            }
        ],
    }


def test_a_game_tools_error_goes_back_to_anthropic_as_an_error_result(define, fake):
    agent = innkeeper(define, "anthropic:claude-test")
    fake.push(message(tool_use("give_item", ARGUMENTS, id="toolu_give")), message(text("Ah, no key.")))

    done = answered(agent, turn_send(agent=agent, content="The key?"), error="The key is not yours.")

    assert done.status == TurnStatus.COMPLETED
    assert fake.bodies[1]["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_give",
            "content": "The key is not yours.",
            "is_error": True,
        }
    ]


# --- OpenAI ---------------------------------------------------------------------------------------


def test_a_game_tool_through_the_openai_sdk(define, fake_openai):
    agent = innkeeper(define, "openai:gpt-test")
    fake_openai.push(
        completion(tool_calls=[tool_call("give_item", ARGUMENTS, id="call_give")]),
        completion("Here is your key."),
    )

    turn = turn_send(agent=agent, content="The key, please.")

    first = fake_openai.requests[0]["body"]
    assert first["stream"] is True  # the call's arguments came in pieces
    assert [t["function"]["name"] for t in first["tools"]] == [*MEMORY_TOOLS, "give_item"]
    assert first["tools"][-1] == {
        "type": "function",
        "function": {
            "name": "give_item",
            "description": GIVE["description"],
            "parameters": GIVE["parameters"],
        },
    }
    [pending] = [e for e in _entries(turn) if e.get("pending")]
    assert (pending["id"], pending["arguments"]) == ("call_give", ARGUMENTS)

    done = answered(agent, turn, result="given")

    assert done.status == TurnStatus.COMPLETED
    messages = fake_openai.requests[1]["body"]["messages"]
    assert messages[-2:] == [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_give",
                    "type": "function",
                    "function": {"name": "give_item", "arguments": json.dumps(ARGUMENTS, sort_keys=True)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_give", "content": "given"},
    ]


def test_a_game_tools_error_goes_back_to_openai_as_the_tools_message(define, fake_openai):
    agent = innkeeper(define, "openai:gpt-test")
    fake_openai.push(
        completion(tool_calls=[tool_call("give_item", ARGUMENTS, id="call_give")]), completion("Ah, no key.")
    )

    done = answered(agent, turn_send(agent=agent, content="The key?"), error="The key is not yours.")

    assert done.status == TurnStatus.COMPLETED
    told = fake_openai.requests[1]["body"]["messages"][-1]
    assert told["role"] == "tool" and told["tool_call_id"] == "call_give"
    assert "The key is not yours." in told["content"]


def test_openai_arguments_that_are_not_json_are_the_models_error_and_the_game_is_not_asked(
    define, fake_openai
):
    agent = innkeeper(define, "openai:gpt-test")
    fake_openai.push(
        completion(tool_calls=[tool_call("give_item", '{"item": "the key"', id="call_bad")]),
        completion("Let me try again."),
    )

    turn = turn_send(agent=agent, content="The key?")

    assert (turn.status, turn.reply or Block.objects.get(turn=turn).entries[-1]["content"]) == (
        TurnStatus.COMPLETED,
        "Let me try again.",
    )
    told = fake_openai.requests[1]["body"]["messages"][-1]
    assert told["tool_call_id"] == "call_bad" and "the game was not asked" in told["content"]
