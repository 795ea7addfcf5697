"""Replays of play that called the game's tools: the copy's calls answered
with what the game answered the original (same tool, same arguments; repeats
in order), never waiting for the game; a call the original never made
answered with an error the model reads and marked "not answered in the
original", on the API and the replay's page."""

import pytest

from agents.models import Agent, Replay, ReplayStatus, Turn, TurnEntry
from agents.replays import NOT_IN_ORIGINAL, OriginalAnswers
from studio.live.events import agent_events_buffer

from ..conftest import call, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DM = "/api/v1/agents/dm"
PAGE = "/studio/ashmere/agents/dm/"
GIVE = {
    "name": "give_item",
    "description": "Hand the player an item from the innkeeper's stock.",
    "parameters": {
        "type": "object",
        "properties": {"item": {"type": "string"}, "count": {"type": "integer"}},
    },
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


def played(api, content, *answers) -> dict:
    """A send whose game tool calls are answered in turn with `answers`
    (each {"result": …} or {"error": …}); the ended turn."""
    turn = api.post(f"{DM}/messages", {"content": content}, format="json").json()["turn"]
    for answer in answers:
        wait_for(lambda: turn_of(api, turn["id"])["status"] == "waiting", timeout=30)
        [pending] = turn_of(api, turn["id"])["pendingToolCalls"]
        posted = api.post(
            f"{DM}/turns/{turn['id']}/tool-results", {"callId": pending["callId"], **answer}, format="json"
        )
        assert posted.status_code == 200, posted.content
    wait_for(lambda: turn_of(api, turn["id"])["status"] == "completed", timeout=30)
    return turn_of(api, turn["id"])


def turn_of(api, turn_id) -> dict:
    return api.get(f"{DM}/turns/{turn_id}").json()["turn"]


@pytest.fixture
def story(api, innkeeper):
    """Block 1 gives two ales (the same call twice, answered differently);
    block 2 asks for the purse, a tool the innkeeper does not have (so not
    called), then gives bread with its arguments in another order; block 3's
    give_item was refused by the game."""
    return [
        played(
            api,
            script(call("give_item", item="ale"), call("give_item", item="ale"), {"say": "Two ales."}),
            {"result": "the first ale"},
            {"result": "the second ale"},
        ),
        played(
            api,
            script(call("look_up_purse"), call("give_item", count=1, item="bread"), {"say": "Bread."}),
            {"result": {"given": "bread"}},
        ),
        played(api, script(call("give_item", item="the key"), {"say": "No key."}), {"error": "Not yours."}),
    ]


def replay(api, **body) -> dict:
    response = api.post(f"{DM}/replays", {"fromBlock": 1, **body}, format="json")
    assert response.status_code == 202, response.content
    return api.get(response["Location"]).json()["replay"]


def test_a_replay_answers_the_copys_calls_as_the_game_answered_the_original(api, story, game):
    done = replay(api)

    assert done["status"] == "completed"
    rows = done["rows"]
    assert all(row["sameReply"] and row["sameToolCalls"] for row in rows), rows
    assert [[(c["result"], c["isError"]) for c in row["replay"]["toolCalls"]] for row in rows] == [
        [("the first ale", False), ("the second ale", False)],
        [('{"given": "bread"}', False)],
        [("Not yours.", True)],
    ]
    copy = Agent.objects.filter(game=game, name=done["replayAgent"]).first()
    assert copy is None  # gone once the replay ended: its turns never waited
    assert not Turn.objects.filter(status__in=["waiting", "running", "queued"]).exists()
    assert not TurnEntry.objects.exists()
    requested = [
        e for e in agent_events_buffer(Agent.objects.get(name="dm").pk)[1] if e["type"] == "tool.requested"
    ]
    assert len(requested) == 4  # the original's four, none of the replay's


def test_a_call_the_original_never_made_is_answered_with_an_error_and_marked(api, story, designer):
    done = replay(api, definition={"tools": [GIVE, LOOK]})

    assert done["status"] == "completed"
    second = done["rows"][1]
    purse, bread = second["replay"]["toolCalls"]
    assert (purse["name"], purse["isError"], purse["notInOriginal"]) == ("look_up_purse", True, True)
    assert purse["result"] == NOT_IN_ORIGINAL.format(name="look_up_purse")
    assert "not answered in the original" in purse["result"].lower()
    assert (bread["result"], "notInOriginal" in bread) == ('{"given": "bread"}', False)
    assert second["sameToolCalls"] is False
    assert all("notInOriginal" not in c for row in done["rows"] for c in row["original"]["toolCalls"])

    page = designer.get(f"{PAGE}replays/{done['id']}/").content.decode()
    assert page.count("data-not-in-original>") == 1
    assert "1 game tool call not answered in the original" in page
    assert 'data-change="tools"' in page


def test_a_replays_copy_that_waited_for_the_game_ends_the_replay_and_its_turn(api, story, monkeypatch):
    # As if the replay had nothing to answer the copy's calls with.
    monkeypatch.setattr("agents.replays._original_answers", lambda replay, number: None)

    done = replay(api)

    assert (done["status"], done["errorCode"]) == ("failed", "internal_error")
    assert "waited for the game" in done["error"]
    assert not Turn.objects.filter(status__in=["waiting", "running", "queued"]).exists()
    assert not Agent.objects.filter(replay_of__isnull=False).exists()  # its copy went with it
    assert Replay.objects.get().status == ReplayStatus.FAILED


# --- matching ---------------------------------------------------------------------------------


def entry(name, arguments, result, is_error=False) -> dict:
    return {
        "type": "tool_call",
        "id": "x",
        "name": name,
        "arguments": arguments,
        "result": result,
        "isError": is_error,
    }


def test_answers_match_on_the_tool_and_its_arguments_as_json_repeats_in_order():
    answers = OriginalAnswers(
        [
            {"type": "message", "role": "user", "content": "hi"},
            entry("give_item", {"item": "ale", "count": 1}, "first"),
            entry("open_memory", {"name": "quest"}, "memory, run by the copy itself"),
            entry("give_item", {"count": 1, "item": "ale"}, "second", True),
        ]
    )

    assert answers("give_item", {"count": 1, "item": "ale"}) == {"result": "first", "isError": False}
    assert answers("give_item", {"item": "ale", "count": 1}) == {"result": "second", "isError": True}
    third = answers("give_item", {"item": "ale", "count": 1})
    assert third["notInOriginal"] is True and third["isError"] is True
    assert answers("give_item", {"item": "ale", "count": 2})["notInOriginal"] is True
    assert answers("open_memory", {"name": "quest"})["notInOriginal"] is True
