"""Agent files and forks of an agent with game tools: the file carries the
tools (config and its history) and every game tool call with the result the
game gave; importing it and forking keep them; a block still waiting for the
game is not written; a replay's copy, marks and all, forks."""

import pytest

from agents.replays import replay_run
from tests.support.agent_file import exported

from ..conftest import call, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DM = "/api/v1/agents/dm"
IMPORT = "/api/v1/agents/import"
GIVE = {
    "name": "give_item",
    "description": "Hand the player an item from the innkeeper's stock.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    "timeoutSeconds": 600,
}
LOOK = {
    "name": "look_up_purse",
    "description": "How much gold the player carries.",
    "parameters": {"type": "object"},
}


@pytest.fixture
def innkeeper(api, game):
    response = api.put(
        DM, {"systemPrompt": "You keep the inn.", "memory": {}, "tools": [GIVE]}, format="json"
    )
    assert response.status_code == 201, response.content


def waiting(api, content) -> dict:
    sent = api.post(f"{DM}/messages", {"content": content}, format="json")
    assert sent.status_code == 202, sent.content
    return sent.json()["turn"]


def answered(api, turn, **answer) -> dict:
    call_id = turn["pendingToolCalls"][0]["callId"]
    posted = api.post(f"{DM}/turns/{turn['id']}/tool-results", {"callId": call_id, **answer}, format="json")
    assert posted.status_code == 200, posted.content
    wait_for(lambda: api.get(f"{DM}/turns/{turn['id']}").json()["turn"]["status"] == "completed", timeout=30)
    return api.get(f"{DM}/turns/{turn['id']}").json()["turn"]


@pytest.fixture
def played(api, innkeeper):
    """Block 1: give_item answered with a result; block 2: with an error."""
    answered(
        api, waiting(api, script(call("give_item", item="ale"), {"say": "Cheers."})), result={"given": "ale"}
    )
    answered(api, waiting(api, script(call("give_item", item="the key"), {"say": "No."})), error="Not yours.")


def calls_of(history: dict) -> list[tuple]:
    return [
        (e["name"], e["arguments"], e["result"], e["isError"])
        for block in history["blocks"]
        for e in block["entries"]
        if e["type"] == "tool_call"
    ]


RECORDED = [
    ("give_item", {"item": "ale"}, '{"given": "ale"}', False),
    ("give_item", {"item": "the key"}, "Not yours.", True),
]


def test_an_agent_file_carries_the_tools_and_the_games_answers(api, played):
    document = exported(api.get(f"{DM}/export"))

    assert document["config"]["tools"] == [GIVE]
    assert [revision["config"]["tools"] for revision in document["configHistory"]] == [[GIVE]]
    calls = [e for block in document["blocks"] for e in block["entries"] if e["type"] == "tool_call"]
    assert [(e["name"], e["arguments"], e["result"], e["isError"]) for e in calls] == RECORDED
    assert all(e["id"] and e["step"] == 1 for e in calls)  # whole, as the model was given them


def test_an_imported_agent_keeps_the_tools_and_the_answers_and_plays_on(api, admin_api, played):
    document = exported(api.get(f"{DM}/export"))

    response = admin_api.post(IMPORT, {**document, "name": "innkeeper"}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["tools"] == [GIVE]
    history = api.get("/api/v1/agents/innkeeper/history").json()
    assert calls_of(history) == RECORDED
    assert api.get("/api/v1/agents/innkeeper/context").json()["tools"][-1] == "give_item"
    sent = api.post(
        "/api/v1/agents/innkeeper/messages",
        {"content": script(call("give_item", item="bread"), {"say": "Bread."})},
        format="json",
    )
    assert sent.status_code == 202 and sent.json()["turn"]["status"] == "waiting"


def test_a_fork_keeps_the_tools_and_the_answers(api, played):
    response = api.post(f"{DM}/fork", {"name": "dm-b", "atBlock": 2}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["tools"] == [GIVE]
    assert calls_of(api.get("/api/v1/agents/dm-b/history").json()) == RECORDED
    assert api.post(f"{DM}/fork", {"name": "dm-c", "atBlock": 1}, format="json").status_code == 201
    assert calls_of(api.get("/api/v1/agents/dm-c/history").json()) == RECORDED[:1]


def test_an_export_while_a_turn_waits_for_the_game_ends_at_the_block_before(api, played):
    waiting(api, script(call("give_item", item="bread"), {"say": "Bread."}))

    document = exported(api.get(f"{DM}/export"))

    assert [block["block"] for block in document["blocks"]] == [1, 2]
    forked = api.post(f"{DM}/fork", {"name": "dm-b", "atBlock": 3}, format="json")
    assert forked.status_code == 409


def test_a_replays_copy_with_a_call_not_answered_in_the_original_forks_and_imports(
    api, admin_api, played, monkeypatch
):
    # Block 3 asks for the purse too, a tool the innkeeper does not have: not called.
    answered(
        api,
        waiting(api, script(call("look_up_purse"), call("give_item", item="ale"), {"say": "Cheers."})),
        result="ale",
    )
    monkeypatch.setattr("agents.replays._enqueue_on_commit", lambda replay: None)
    monkeypatch.setattr("agents.replays.replay_copy_remove", lambda replay_id: False)  # kept to fork
    started = api.post(
        f"{DM}/replays", {"fromBlock": 3, "through": 3, "definition": {"tools": [GIVE, LOOK]}}, format="json"
    )
    assert started.status_code == 202, started.content
    replay = started.json()["replay"]

    assert replay_run(replay["id"]).status == "completed"

    copy = f"/api/v1/agents/{replay['replayAgent']}"
    marked = api.get(f"{copy}/history").json()["blocks"][-1]["entries"][1]
    assert (marked["name"], marked["notInOriginal"]) == ("look_up_purse", True)
    forked = api.post(f"{copy}/fork", {"name": "dm-c", "atBlock": 3}, format="json")
    assert forked.status_code == 201, forked.content
    assert forked.json()["tools"] == [GIVE, LOOK]
    kept = api.get("/api/v1/agents/dm-c/history").json()["blocks"][-1]["entries"][1]
    assert (kept["name"], kept["notInOriginal"], kept["isError"]) == ("look_up_purse", True, True)
    document = exported(api.get(f"{copy}/export"))
    imported = admin_api.post(IMPORT, {**document, "name": "dm-d"}, format="json")
    assert imported.status_code == 201, imported.content
    again = api.get("/api/v1/agents/dm-d/history").json()["blocks"][-1]["entries"][1]
    assert (again["name"], again["notInOriginal"]) == ("look_up_purse", True)
