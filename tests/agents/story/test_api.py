"""Looking at an agent through time: the store and the context as of a
block, a memory's history, checkpoints and what each changed.
Of the nine-block story, played once for the module (conftest.py)."""

import pytest

from agents.models import Agent, Checkpoint
from agents.pages.view_models import timeline
from tests.support.time_story import DM, MESSAGES, STORE_AFTER, store_of

from ...conftest import error_of

# Not transactional: the story is played once for the module (conftest.py).
pytestmark = pytest.mark.django_db


# --- the store as of a block --------------------------------------------------------------


def test_the_store_as_of_each_block_is_what_the_tools_left_when_it_ended(api, story):
    for number, expected in STORE_AFTER.items():
        response = api.get(f"{DM}/memories?atBlock={number}")

        assert response.status_code == 200, response.content
        assert store_of(response.json()) == expected, number


def test_the_store_as_of_the_newest_block_is_the_store_as_it_stands(api, story):
    assert api.get(f"{DM}/memories?atBlock=9").json() == api.get(f"{DM}/memories").json()


def test_the_store_as_of_a_block_pages_like_the_store(api, story):
    first = api.get(f"{DM}/memories?atBlock=5&limit=1").json()
    rest = api.get(f"{DM}/memories?atBlock=5&limit=1&cursor={first['nextCursor']}").json()

    assert [m["name"] for m in first["memories"] + rest["memories"]] == ["quest", "npcs"]
    assert rest["nextCursor"] is None
    assert (
        first["openTokens"] == rest["openTokens"] == api.get(f"{DM}/memories?atBlock=5").json()["openTokens"]
    )


def test_the_store_as_of_a_block_says_who_wrote_each_memory_last_and_its_budgets(api, story):
    before = {m["name"]: m for m in api.get(f"{DM}/memories?atBlock=4").json()["memories"]}
    after = api.get(f"{DM}/memories?atBlock=5").json()

    assert before["quest"]["updatedBy"] == "agent"
    quest = next(m for m in after["memories"] if m["name"] == "quest")
    assert (quest["updatedBy"], quest["content"]) == ("compactor", "Cross the river.")
    assert quest["updatedAt"] > before["quest"]["updatedAt"]
    assert after["openTokens"] == sum(m["tokens"] for m in after["memories"] if m["open"]) > 0
    assert after["maxOpenTokens"] == 4000
    assert after["storeBytes"] == sum(m["bytes"] for m in after["memories"])


def test_a_block_the_agent_has_not_played_is_404(api, story):
    for path in ("memories", "context"):
        response = api.get(f"{DM}/{path}?atBlock=10")

        assert response.status_code == 404
        assert error_of(response) == {
            "code": "block_not_found",
            "message": "Agent 'dm' has no block 10: its blocks are 1–9.",
        }


def test_a_memory_history_has_every_change_oldest_first_and_outlives_the_memory(api, story):
    response = api.get(f"{DM}/memories/quest/history")

    assert response.status_code == 200
    events = response.json()["events"]
    assert [(e["change"], e["by"], e["block"]) for e in events] == [
        ("created", "agent", 1),
        ("opened", "agent", 1),
        ("updated", "agent", 2),
        ("closed", "agent", 2),
        ("opened", "agent", 3),
        ("updated", "compactor", 5),
        ("deleted", "agent", 6),
    ]
    turn_ids = [t["id"] for t in story]
    assert [e["turnId"] for e in events] == [turn_ids[0]] * 2 + [turn_ids[1]] * 2 + [
        turn_ids[2],
        None,
        turn_ids[5],
    ]
    rewrite = events[5]
    assert (rewrite["before"]["content"], rewrite["after"]["content"]) == (
        "Find the silver key.",
        "Cross the river.",
    )
    assert rewrite["checkpoint"] == 1
    assert events[-1]["after"] is None and events[-1]["before"]["content"] == "Cross the river."
    assert all(e["at"] for e in events)


def test_a_memory_history_pages_like_every_list(api, story):
    first = api.get(f"{DM}/memories/quest/history?limit=4").json()
    rest = api.get(f"{DM}/memories/quest/history?limit=4&cursor={first['nextCursor']}").json()

    assert [e["change"] for e in first["events"]] == ["created", "opened", "updated", "closed"]
    assert [e["change"] for e in rest["events"]] == ["opened", "updated", "deleted"]
    assert rest["nextCursor"] is None


def test_a_memory_the_agent_never_had_has_no_history(api, story):
    response = api.get(f"{DM}/memories/dragons/history")

    assert response.status_code == 404
    assert error_of(response)["code"] == "memory_not_found"


def test_the_context_as_of_a_block_names_the_checkpoint_in_force_and_counts_its_tokens(api, story):
    early, after_compaction, last = (api.get(f"{DM}/context?atBlock={n}").json() for n in (4, 5, 9))

    assert early["checkpoint"] is None and early["contextBlock"] is None
    first, forced = Checkpoint.objects.order_by("id")
    assert after_compaction["checkpoint"]["id"] == 1
    assert after_compaction["contextBlock"] == first.context_block
    assert after_compaction["tokens"]["contextBlock"] == first.block_tokens
    assert (last["checkpoint"]["id"], last["checkpoint"]["kind"], last["checkpoint"]["throughBlock"]) == (
        2,
        "forced",
        7,
    )
    assert [m["content"] for m in last["messages"] if m["role"] == "user"] == [MESSAGES[7], MESSAGES[8]]
    tokens = last["tokens"]
    assert tokens["total"] == tokens["system"] + tokens["contextBlock"] + tokens["messages"] + tokens["tools"]


def test_the_context_as_of_a_block_keeps_the_system_prompt_it_was_played_with(api, story):
    api.put(DM, {"systemPrompt": "You are the innkeeper.", "memory": {}}, format="json")

    then = api.get(f"{DM}/context?atBlock=3").json()
    now = api.get(f"{DM}/context").json()

    assert then["system"] == "You are the dungeon master."
    assert now["system"] == "You are the innkeeper."
    assert "block" not in now


def test_a_block_whose_turn_recorded_no_context_is_409(api, story):
    from agents.models import Block

    Block.objects.filter(number=3).update(revision=None)

    response = api.get(f"{DM}/context?atBlock=3")

    assert response.status_code == 409
    assert error_of(response)["code"] == "history_not_recorded"


def test_checkpoints_are_listed_newest_first_with_kind_blocks_time_and_tokens(api, story):
    response = api.get(f"{DM}/checkpoints")

    assert response.status_code == 200
    listed = response.json()["checkpoints"]
    assert [(c["id"], c["kind"], c["throughBlock"], c["fromBlock"]) for c in listed] == [
        (2, "forced", 7, 9),
        (1, "compaction", 3, 5),
    ]
    assert all(c["tokens"] > 0 and c["createdAt"] for c in listed)
    first = api.get(f"{DM}/checkpoints?limit=1").json()
    rest = api.get(f"{DM}/checkpoints?limit=1&cursor={first['nextCursor']}").json()
    assert [c["id"] for c in first["checkpoints"] + rest["checkpoints"]] == [2, 1]
    assert rest["nextCursor"] is None


def test_a_checkpoint_shows_its_context_block_and_the_rewrites_the_compactor_made(api, story):
    response = api.get(f"{DM}/checkpoints/1")

    assert response.status_code == 200
    body = response.json()
    assert body["contextBlock"] == Checkpoint.objects.order_by("id").first().context_block
    assert body["previous"] is None
    summary = body["changes"]["summary"]
    assert summary["before"] is None and summary["after"] == body["summary"]
    assert {line["op"] for line in summary["lines"]} == {"added"}
    [rewrite] = body["changes"]["rewrites"]
    assert (rewrite["name"], rewrite["applied"], rewrite["before"], rewrite["after"]) == (
        "quest",
        True,
        "Find the silver key.",
        "Cross the river.",
    )
    assert rewrite["lines"] == [
        {"op": "removed", "text": "Find the silver key."},
        {"op": "added", "text": "Cross the river."},
    ]
    assert [m["name"] for m in body["openMemories"]] == ["quest"]


def test_a_checkpoint_diffs_its_summary_against_the_one_before(api, story):
    first, second = (api.get(f"{DM}/checkpoints/{n}").json() for n in (1, 2))

    assert second["previous"] == 1
    summary = second["changes"]["summary"]
    assert summary["before"] == first["summary"]
    kept = [line["text"] for line in summary["lines"] if line["op"] in ("same", "removed")]
    assert "\n".join(kept) == first["summary"]
    added = [line["text"] for line in summary["lines"] if line["op"] in ("same", "added")]
    assert "\n".join(added) == second["summary"]
    assert second["changes"]["rewrites"] == []


@pytest.mark.parametrize("checkpoint", ["3", "0", "abc", "99999999999999"])
def test_a_checkpoint_the_agent_does_not_have_is_404(api, story, checkpoint):
    response = api.get(f"{DM}/checkpoints/{checkpoint}")

    assert response.status_code == 404
    assert error_of(response)["code"] == "checkpoint_not_found"


def test_unknown_query_parameters_of_the_new_lists_are_400(api, story):
    for path in ("checkpoints?limt=2", "memories/quest/history?limt=2", "checkpoints?limit=0"):
        response = api.get(f"{DM}/{path}")
        assert response.status_code == 400, path


def test_the_timeline_for_the_agent_page_has_the_blocks_and_checkpoints_in_order(agent, story):
    Agent.objects.filter(pk=agent.pk).update(recorded_from_block=2)
    agent.refresh_from_db()

    line = timeline(agent, limit=4)

    assert [(b["block"], b["folded"], b["recorded"]) for b in line["blocks"]] == [
        (6, True, True),
        (7, True, True),
        (8, False, True),
        (9, False, True),
    ]
    assert [(c["id"], c["fromBlock"]) for c in line["checkpoints"]] == [(1, 5), (2, 9)]
    assert [b["recorded"] for b in timeline(agent)["blocks"][:2]] == [False, True]
