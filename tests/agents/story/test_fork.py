"""Forking an agent from a block: a new agent with the same config, as the
original stood when the block ended; the original untouched.
Of the nine-block story, played once for the module (conftest.py)."""

import pytest

from agents.models import Agent
from agents.providers.scripted import ScriptedProvider
from billing.models import CostLine
from tests.support.time_story import DM, MESSAGES, STORE_AFTER, store_of

from ...conftest import call, error_of, script

# Not transactional: the story is played once for the module (conftest.py).
pytestmark = pytest.mark.django_db

FORK = "/api/v1/agents/dm-b"


def fork(api, at_block, name="dm-b", status=201):
    response = api.post(f"{DM}/fork", {"name": name, "atBlock": at_block}, format="json")
    assert response.status_code == status, response.content
    return response


def original_views(api) -> dict:
    paths = ["", "/history?limit=500", "/memories", "/checkpoints", "/context", "/memories/quest/history"]
    return {path: api.get(f"{DM}{path}").json() for path in paths}


def test_a_fork_has_the_store_the_blocks_and_the_checkpoint_as_they_stood_at_its_block(api, story):
    response = fork(api, 5)

    assert response["Location"] == FORK
    agent = response.json()
    assert agent["name"] == "dm-b" and agent["stats"]["blocks"] == 5
    assert {k: agent[k] for k in ("systemPrompt", "model", "memory", "compaction")} == {
        k: api.get(DM).json()[k] for k in ("systemPrompt", "model", "memory", "compaction")
    }
    assert store_of(api.get(f"{FORK}/memories").json()) == STORE_AFTER[5]
    assert api.get(f"{FORK}/memories").json() == api.get(f"{DM}/memories?atBlock=5").json()
    blocks = api.get(f"{FORK}/history").json()["blocks"]
    assert [(b["block"], b["folded"]) for b in blocks] == [
        (1, True),
        (2, True),
        (3, True),
        (4, False),
        (5, False),
    ]
    original = api.get(f"{DM}/history?limit=5").json()["blocks"]
    assert [b["entries"] for b in blocks] == [b["entries"] for b in original]
    in_force, first = api.get(f"{FORK}/checkpoint").json(), api.get(f"{DM}/checkpoints/1").json()
    assert in_force == {key: first[key] for key in in_force}
    assert [c["id"] for c in api.get(f"{FORK}/checkpoints").json()["checkpoints"]] == [1]


def test_a_fork_keeps_the_history_of_its_memories_up_to_its_block(api, story):
    fork(api, 5)

    forked = api.get(f"{FORK}/memories/quest/history").json()["events"]
    original = api.get(f"{DM}/memories/quest/history").json()["events"][:6]

    strip = ("turnId",)
    assert [{k: v for k, v in e.items() if k not in strip} for e in forked] == [
        {k: v for k, v in e.items() if k not in strip} for e in original
    ]
    assert {e["turnId"] for e in forked}.isdisjoint({t["id"] for t in story})


def test_a_fork_at_the_newest_block_is_given_the_same_context_as_the_original(api, story):
    fork(api, 9)

    assert api.get(f"{FORK}/context").json() == api.get(f"{DM}/context").json()
    assert api.get(f"{FORK}/checkpoint").json() == api.get(f"{DM}/checkpoint").json()


def test_a_fork_before_any_checkpoint_has_none_and_nothing_folded(api, story):
    fork(api, 4)

    assert api.get(f"{FORK}/checkpoint").status_code == 404
    assert not any(b["folded"] for b in api.get(f"{FORK}/history").json()["blocks"])
    assert store_of(api.get(f"{FORK}/memories").json()) == STORE_AFTER[4]


def test_a_send_to_the_fork_plays_on_from_its_block_and_leaves_the_original_alone(api, story, monkeypatch):
    fork(api, 5)
    before = original_views(api)
    seen = []
    original_complete = ScriptedProvider.complete

    def complete(self, request, control):
        seen.append(request)
        return original_complete(self, request, control)

    monkeypatch.setattr(ScriptedProvider, "complete", complete)

    response = api.post(
        f"{FORK}/messages",
        {"content": script(call("close_memory", name="quest", content="Go back to the inn."))},
        format="json",
    )

    turn = response.json()["turn"]
    assert (turn["status"], turn["block"]) == ("completed", 6)
    assert turn["toolCalls"][0]["isError"] is False
    assert store_of(api.get(f"{FORK}/memories").json())["quest"] == (False, "Go back to the inn.")
    sent = seen[0]
    assert sent.context_block == api.get(f"{DM}/checkpoints/1").json()["contextBlock"]
    assert [m["content"] for m in sent.messages if m["role"] == "user"][:2] == [MESSAGES[3], MESSAGES[4]]
    assert original_views(api) == before


def test_a_fork_copies_no_cost_lines(api, story, game):
    lines_before = CostLine.objects.count()

    fork(api, 5)

    assert CostLine.objects.count() == lines_before
    assert api.get("/api/v1/billing/lines?agent=dm-b").json()["lines"] == []
    turns = api.get(f"{FORK}/turns").json()["turns"]
    assert len(turns) == 5 and all(t["cost"] == {"total": "0.000000", "lines": []} for t in turns)
    assert [t["reply"] for t in reversed(turns)] == [t["reply"] for t in story[:5]]


def test_forking_leaves_the_original_exactly_as_it_was(api, story):
    before = original_views(api)

    fork(api, 5)
    fork(api, 2, name="dm-c")

    assert original_views(api) == before


def test_a_fork_to_a_name_in_use_is_409(api, story, define):
    define("npc")

    for name in ("npc", "dm"):
        response = fork(api, 2, name=name, status=409)
        assert error_of(response)["code"] == "name_taken"


def test_a_fork_whose_store_no_longer_fits_the_config_is_409(api, story):
    # A budget lowered under a memory the agent held then (a definition can
    # no longer lower it under one it holds now: see test_api_agents).
    Agent.objects.filter(name="dm").update(max_open_tokens=5)

    response = fork(api, 2, status=409)  # npcs, closed then: 6 tokens could never be opened again

    error = error_of(response)
    assert error["code"] == "store_does_not_fit"
    why = "'npcs' would be 6 tokens, more than the whole open budget of 5"
    assert "as of block 2" in error["message"] and why in error["message"], error["message"]
    assert api.get(FORK).status_code == 404


def test_a_fork_whose_open_memory_is_larger_than_the_whole_open_budget_is_409(api, story):
    Agent.objects.filter(name="dm").update(max_open_tokens=5)

    response = fork(api, 5, status=409)  # npcs, open then: 6 tokens, never openable once closed

    error = error_of(response)
    assert error["code"] == "store_does_not_fit"
    assert "'npcs' would be 6 tokens, more than the whole open budget of 5" in error["message"]
    assert api.get(FORK).status_code == 404


def test_a_fork_keeps_open_memories_past_a_lowered_max_open_tokens_as_a_compactor_may(api, story):
    config = {"systemPrompt": "You are the dungeon master.", "memory": {"maxOpenTokens": 9}}
    assert api.put(DM, config, format="json").status_code == 200

    fork(api, 5)  # 10 tokens open then: past the guideline, far below half of maxTokens

    assert api.get(f"{FORK}/memories").json()["openTokens"] == 10


def test_a_fork_at_a_block_that_does_not_exist_is_404(api, story):
    response = fork(api, 10, status=404)

    assert error_of(response)["code"] == "block_not_found"
    assert api.get(FORK).status_code == 404


def test_another_games_agent_cannot_be_forked(outsider, story):
    response = outsider.post(f"{DM}/fork", {"name": "mine", "atBlock": 2}, format="json")

    assert response.status_code == 404
    assert outsider.get("/api/v1/agents").json()["agents"] == []
