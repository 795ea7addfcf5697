"""The `openai:` provider's request body: the conversation is encoded
only where it is new since the last call for it, however long the
history and however many agents share the process — and the body is
always what encoding the whole request would give."""

import copy
import json

import pytest

from agents.providers import openai_chat
from agents.providers.base import ModelRequest
from agents.providers.openai_chat import chat_body, chat_messages

PARAMS = {"model": "gpt-test", "stream": True}


def turn(number: int) -> list[dict]:
    """One turn's messages: the player, a tool call and its result, the reply."""
    call = {"id": f"c{number}", "name": "open_memory", "arguments": {"name": "notes"}}
    return [
        {"role": "user", "content": f"Message {number}, café «{number}»."},
        {"role": "assistant", "content": None, "toolCalls": [call]},
        {
            "role": "tool",
            "toolCallId": f"c{number}",
            "name": "open_memory",
            "content": "Open.",
            "isError": False,
        },
        {"role": "assistant", "content": f"Reply {number}."},
    ]


def request(system: str, messages: list[dict]) -> ModelRequest:
    return ModelRequest(system=system, context_block=None, messages=messages, tools=["open_memory"])


def body_of(req: ModelRequest) -> dict:
    """The body, checked against the whole request encoded afresh."""
    body = json.loads(chat_body(req, PARAMS))
    assert body == {"messages": chat_messages(req), **PARAMS}
    return body


@pytest.fixture
def encodes(monkeypatch):
    """`encodes(req)`: the request's body (checked as `body_of` does) and how
    many objects chat_body turned into JSON for it (calls of json.dumps)."""
    counted = {"n": 0}
    dumps = json.dumps

    def counting(*args, **kwargs):
        counted["n"] += 1
        return dumps(*args, **kwargs)

    monkeypatch.setattr(openai_chat, "_history", openai_chat._EncodedHistory())

    def encode(req: ModelRequest) -> tuple[dict, int]:
        counted["n"] = 0
        with monkeypatch.context() as patch:
            patch.setattr(openai_chat.json, "dumps", counting)
            raw = chat_body(req, PARAMS)
        body = json.loads(raw)
        assert body == {"messages": chat_messages(req), **PARAMS}
        return body, counted["n"]

    return encode


def test_a_call_encodes_only_what_is_new_however_long_the_history(encodes):
    history = [message for number in range(2_000) for message in turn(number)]  # 8,000 messages
    _, first = encodes(request("You are the keeper.", history))

    body, then = encodes(request("You are the keeper.", history + turn(2_000)))

    assert first > 8_000
    # The system prompt, the four new messages (one with a tool call's arguments), the params.
    assert then == 7
    assert len(body["messages"]) == 8_005


def test_agents_sharing_a_process_each_encode_only_what_is_new(encodes):
    agents = {f"Agent {index}": [m for number in range(100) for m in turn(number)] for index in range(30)}
    for system, history in agents.items():
        encodes(request(system, history))

    for system, history in agents.items():
        history += turn(100)
        assert encodes(request(system, history))[1] == 7, system


def test_history_made_again_from_its_entries_is_not_encoded_again(encodes):
    """The last turn's messages come back as new, equal objects once its
    block joins the history: they are the same JSON."""
    history = [m for number in range(50) for m in turn(number)]
    encodes(request("You are the keeper.", history + turn(50)[:3]))

    again = history + copy.deepcopy(turn(50)) + turn(51)[:1]

    # The system prompt, the reply and the new player's message, the params.
    assert encodes(request("You are the keeper.", again))[1] == 4


def test_a_request_that_does_not_extend_the_last_one_is_encoded_whole():
    history = [m for number in range(20) for m in turn(number)]
    body_of(request("You are the keeper.", history + turn(20)))
    # A transient send: the history, then a message that is not kept.
    body_of(request("You are the keeper.", history + [{"role": "user", "content": "Just asking."}]))
    # The next send extends the history, not the transient one.
    body_of(request("You are the keeper.", history + turn(20) + turn(21)[:1]))
    # The same first message with other content after it: a history edited in place.
    edited = [*history[:10], {"role": "user", "content": "Something else."}, *history[11:]]
    body_of(request("You are the keeper.", edited))


def test_the_encoded_histories_a_process_keeps_are_bounded(monkeypatch):
    kept = openai_chat._EncodedHistory(max_bytes=50_000)
    monkeypatch.setattr(openai_chat, "_history", kept)
    for index in range(40):
        body_of(request(f"Agent {index}", [m for number in range(20) for m in turn(number)]))

    assert kept.bytes == sum(len(run.joined) for run in kept.runs.values()) <= 50_000
    assert 0 < len(kept.runs) < 40
