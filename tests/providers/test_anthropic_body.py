"""The `anthropic:` provider's request body: the history is encoded only
where it is new since the last call for it, however long it is and
however many agents share the process; tool ids made unique cost what
the history's length does, whatever ids the model chose — and the body is
always, byte for byte, what encoding the whole request gives."""

import copy
import json
import random

import pytest

from agents.providers import anthropic_messages
from agents.providers.anthropic_messages import _json, request_body, request_messages
from agents.providers.base import ModelRequest

PARAMS = {"model": "claude-test", "max_tokens": 1000}


def turn(number: int, call_id: str = "call_1") -> list[dict]:
    """One turn's messages: the player, a tool call and its result, the
    reply — the call's id the one the scripted model gives every call."""
    call = {
        "id": call_id,
        "name": "open_memory",
        "arguments": {"name": "notes", "why": ["b", {"y": 2, "x": 1}]},
    }
    return [
        {"role": "user", "content": f"Message {number}, café «{number}»."},
        {"role": "assistant", "content": None, "toolCalls": [call]},
        {"role": "tool", "toolCallId": call_id, "name": "open_memory", "content": "Open.", "isError": False},
        {"role": "assistant", "content": f"Reply {number}."},
    ]


def request(
    messages: list[dict], *, block: str | None = "The context block.", tools: bool = True
) -> ModelRequest:
    return ModelRequest(
        system="You are the keeper.",
        context_block=block,
        messages=messages,
        tools=["open_memory"] if tools else [],
    )


def whole(req: ModelRequest) -> bytes:
    """The body as encoding the whole request gives it."""
    messages = request_messages(req, tools_offered=bool(req.tools))
    return _json({**PARAMS, "messages": messages, "stream": True})


@pytest.fixture
def encodes(monkeypatch):
    """`encodes(req)`: the request's body (checked against the whole
    request encoded afresh) and how many content blocks were turned into
    JSON for it."""
    monkeypatch.setattr(anthropic_messages, "_turns", anthropic_messages._EncodedTurns())
    counted = {"n": 0}
    block_json = anthropic_messages._block_json

    def counting(block):
        counted["n"] += 1
        return block_json(block)

    def encode(req: ModelRequest) -> tuple[dict, int]:
        counted["n"] = 0
        with monkeypatch.context() as patch:
            patch.setattr(anthropic_messages, "_block_json", counting)
            raw = request_body(req, PARAMS)
        assert raw == whole(req)
        return json.loads(raw), counted["n"]

    return encode


def test_a_call_encodes_only_what_is_new_however_long_the_history(encodes):
    history = [message for number in range(2_000) for message in turn(number)]  # 8,000 messages
    _, first = encodes(request(history))

    body, then = encodes(request(history + turn(2_000)))

    assert first > 8_000
    # The context block, and the new turn's four blocks (text, tool use, tool result, text).
    assert then == 5
    assert len(body["messages"]) == 8_004  # the context block joins the first player message
    assert body["messages"][0]["content"][0]["text"] == "The context block."


def test_agents_sharing_a_process_each_encode_only_what_is_new(encodes):
    agents = [[m for number in range(100) for m in turn(number)] for _ in range(30)]
    for history in agents:
        encodes(request(history))

    for index, history in enumerate(agents):
        history += turn(100)
        assert encodes(request(history))[1] == 5, index


def test_history_made_again_from_its_entries_is_not_encoded_again(encodes):
    history = [m for number in range(50) for m in turn(number)]
    encodes(request(history + turn(50)[:3]))

    again = history + copy.deepcopy(turn(50)) + turn(51)[:1]

    # The context block, the reply, the new player's message.
    assert encodes(request(again))[1] == 3


@pytest.mark.parametrize(
    "call_id",
    [
        lambda number: "call_1",  # the scripted model's, every call
        lambda number: "p" * 56 + f"{number // 2:08d}",  # alike in the 56 characters kept, each twice
    ],
    ids=["one id", "one prefix"],
)
def test_tool_call_ids_the_model_repeats_cost_what_the_history_is_long(monkeypatch, call_id):
    """The model chooses its calls' ids. Each must go out unique, and
    finding the next free one must not look through every one taken
    before it."""
    looked = {"n": 0}

    class Counted(set):
        def __contains__(self, item):
            looked["n"] += 1
            return super().__contains__(item)

    real = anthropic_messages._ToolIds.__init__

    def counted_init(self):
        real(self)
        self.used = Counted()

    monkeypatch.setattr(anthropic_messages._ToolIds, "__init__", counted_init)
    history = [m for number in range(3_000) for m in turn(number, call_id(number))]

    turns = request_messages(request(history), tools_offered=True)

    uses = [b["id"] for t in turns for b in t["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for t in turns for b in t["content"] if b["type"] == "tool_result"]
    assert len(set(uses)) == 3_000
    assert results == uses  # each result answers its own call
    assert looked["n"] < 4 * 3_000


def test_a_request_that_does_not_extend_the_last_one_is_encoded_whole(encodes):
    history = [m for number in range(20) for m in turn(number)]
    encodes(request(history + turn(20)))
    # A transient send: the history, then a message that is not kept, no tools offered.
    encodes(request(history + [{"role": "user", "content": "Just asking."}], tools=False))
    # The next send extends the history, not the transient one.
    encodes(request(history + turn(20) + turn(21)[:1]))
    # The same first message with other content after it: a history edited in place.
    edited = [*history[:10], {"role": "user", "content": "Something else."}, *history[11:]]
    encodes(request(edited))
    # The same history offered without tools: its calls become text.
    _, count = encodes(request(edited, tools=False))
    assert count > len(edited) / 2


def test_arguments_read_back_in_another_order_are_the_same_bytes(encodes):
    """jsonb gives an object's keys back in its own order: with tools or
    without, a history read again must be the same bytes (the prompt cache)."""
    history = [m for number in range(5) for m in turn(number)]
    for tools in (True, False):
        first = request_body(request(history, tools=tools), PARAMS)
        again = copy.deepcopy(history)
        again[1]["toolCalls"][0]["arguments"] = {"why": ["b", {"x": 1, "y": 2}], "name": "notes"}
        assert request_body(request(again, tools=tools), PARAMS) == first


def test_any_sequence_of_requests_gives_the_whole_requests_bytes(encodes):
    """Histories that grow, fork back, start with the assistant, hold a run
    of one role, ids the model repeats or writes badly, arguments that are
    not an object, context blocks that come and go: every body is what the
    whole request encodes."""
    pick = random.Random(38)

    def message(number: int) -> dict:
        kind = pick.choice(["user", "assistant", "call", "tool", "blank"])
        call_id = pick.choice(["call_1", "call 1", "", "x" * 70, f"c{number}"])
        if kind == "call":
            arguments = pick.choice([{"b": number, "a": [1, {"d": 1, "c": 2}]}, "not an object", [1, 2]])
            calls = [
                {"id": call_id, "name": "note", "arguments": arguments} for _ in range(pick.randint(1, 3))
            ]
            return {"role": "assistant", "content": pick.choice([None, "Let me look."]), "toolCalls": calls}
        if kind == "tool":
            return {
                "role": "tool",
                "toolCallId": call_id,
                "name": "note",
                "content": "ok",
                "isError": pick.random() < 0.3,
            }
        if kind == "blank":
            return {"role": pick.choice(["user", "assistant"]), "content": pick.choice(["", "  ", None])}
        return {"role": kind, "content": f"{kind} says {number} «ü»"}

    conversations = [[message(n) for n in range(pick.randint(0, 5))] for _ in range(4)]
    for step in range(400):
        index = pick.randrange(len(conversations))
        history = conversations[index]
        action = pick.random()
        if action < 0.6:
            history.extend(message(step) for _ in range(pick.randint(1, 4)))
            sent = history
        elif action < 0.8:
            sent = [*history, message(step)]  # transient: not kept
        else:
            sent = history[: pick.randint(0, len(history))]  # folded back
            conversations[index] = history = list(sent)
        block = pick.choice([None, "", "The block.", f"Block {step}."])
        encodes(request(sent, block=block, tools=pick.random() < 0.8))


def test_the_encoded_histories_a_process_keeps_are_bounded(monkeypatch):
    kept = anthropic_messages._EncodedTurns(max_bytes=50_000)
    monkeypatch.setattr(anthropic_messages, "_turns", kept)
    for index in range(40):
        history = [m for number in range(40) for m in turn(number + index)]
        request_body(request(history), PARAMS)
        assert kept.bytes <= 50_000
    assert 0 < len(kept.runs) < 40
    assert kept.bytes == sum(run.bytes for run in kept.runs.values())
