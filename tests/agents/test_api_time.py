"""Looking at an agent through time: the store and the context as of a
block, a memory's history, checkpoints and what each changed."""

import importlib

import pytest
from django.apps import apps

from agents.engine import turn_send
from agents.history_reads import timeline
from agents.models import Agent, AgentRevision, Checkpoint, Turn, TurnStatus
from agents.providers.scripted import ScriptedProvider
from agents.turn_slot import turn_cancel
from memories.models import MemoryEvent

from ..conftest import call, error_of, in_thread, script, wait_for
from .time_story import DM, MESSAGES, STORE_AFTER, compact_dropping_a_rewrite, play, store_of

# Transactional: compactions run after commit.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def story(api, agent, studio_conf):
    return play(api, studio_conf)


@pytest.fixture
def first_calls(monkeypatch):
    """What the model was given on each turn's first call, in order."""
    seen = []
    original = ScriptedProvider.complete

    def complete(self, request, control):
        if not request.messages or request.messages[-1]["role"] == "user":
            seen.append(request)
        return original(self, request, control)

    monkeypatch.setattr(ScriptedProvider, "complete", complete)
    return seen


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


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", "", "99999999999"])
def test_an_at_block_that_is_not_a_block_number_is_400(api, agent, value):
    for path in ("memories", "context"):
        response = api.get(f"{DM}/{path}?atBlock={value}")

        assert response.status_code == 400
        assert "atBlock" in error_of(response)["message"]


def test_a_block_the_agent_has_not_played_is_404(api, story):
    for path in ("memories", "context"):
        response = api.get(f"{DM}/{path}?atBlock=10")

        assert response.status_code == 404
        assert error_of(response) == {
            "code": "block_not_found",
            "message": "Agent 'dm' has no block 10: its blocks are 1–9.",
        }


def test_a_block_still_being_played_is_409_until_it_ends(api, agent):
    thread, _ = in_thread(turn_send, agent=agent, content=script({"sleep": 30}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    running = api.get(f"{DM}/memories?atBlock=1")
    turn_cancel(Turn.objects.get(agent=agent))
    thread.join(10)

    assert running.status_code == 409
    assert error_of(running)["code"] == "block_running"
    assert api.get(f"{DM}/memories?atBlock=1").status_code == 200


def test_blocks_played_before_the_studio_kept_their_changes_are_409_saying_from_when_it_can(api, agent):
    for n in range(3):
        turn_send(
            agent=agent, content=script(call("close_memory", name=f"m{n}", description="d", content="c"))
        )
    # An agent from before: its blocks so far predate the record.
    Agent.objects.filter(pk=agent.pk).update(recorded_from_block=3)
    MemoryEvent.objects.update(block=None)

    old = api.get(f"{DM}/memories?atBlock=2")
    recorded = api.get(f"{DM}/memories?atBlock=3")

    assert old.status_code == 409
    assert error_of(old)["code"] == "history_not_recorded"
    assert "from 3 on" in error_of(old)["message"]
    assert [m["name"] for m in recorded.json()["memories"]] == ["m0", "m1", "m2"]


def test_the_migration_marks_agents_that_exist_as_recorded_only_from_their_next_block(api, agent):
    for n in range(2):
        turn_send(
            agent=agent, content=script(call("close_memory", name=f"m{n}", description="d", content="c"))
        )
    Agent.objects.filter(pk=agent.pk).update(recorded_from_block=1)
    AgentRevision.objects.all().delete()
    MemoryEvent.objects.update(block=None)

    importlib.import_module("agents.migrations.0007_time_records").record_from_here(apps, None)
    importlib.import_module("memories.migrations.0002_event_block_and_checkpoint").blocks_from_turns(
        apps, None
    )

    agent.refresh_from_db()
    assert agent.recorded_from_block == 3
    assert AgentRevision.objects.get(agent=agent).system_prompt == "You are the dungeon master."
    assert list(MemoryEvent.objects.order_by("id").values_list("block", flat=True)) == [1, 2]
    assert error_of(api.get(f"{DM}/memories?atBlock=2"))["code"] == "history_not_recorded"


# --- a memory's history -------------------------------------------------------------------------


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


def test_a_memory_name_with_a_slash_has_its_history_too(api, agent):
    turn_send(
        agent=agent, content=script(call("close_memory", name="north/road", description="d", content="c"))
    )

    events = api.get(f"{DM}/memories/north/road/history").json()["events"]

    assert [(e["name"], e["change"]) for e in events] == [("north/road", "created")]


# --- the context as of a block ------------------------------------------------------------------


def test_the_context_as_of_a_block_is_what_its_first_model_call_was_given(
    api, agent, studio_conf, first_calls
):
    play(api, studio_conf)

    for number in range(1, 10):
        body = api.get(f"{DM}/context?atBlock={number}").json()
        sent = first_calls[number - 1]

        assert body["block"] == number
        assert (body["system"], body["contextBlock"], body["tools"]) == (
            sent.system,
            sent.context_block,
            sent.tools,
        ), number
        assert body["messages"] == sent.messages, number
        assert body["messages"][-1] == {"role": "user", "content": MESSAGES[number - 1]}


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


def test_the_context_of_a_block_that_waited_for_a_compaction_has_the_checkpoint_it_waited_for(
    api, define, studio_conf, first_calls
):
    studio_conf(COMPACTION_SOFT_RATIO=10.0)  # no compaction after a turn: only the overflow wait
    define("dm", memory_enabled=False, max_tokens=600)
    words = "lorem ipsum dolor sit amet " * 20
    for n in range(5):
        api.post(f"{DM}/messages", {"content": f"{n} {words}"}, format="json")

    checkpoint = Checkpoint.objects.get()
    body = api.get(f"{DM}/context?atBlock=5").json()

    assert checkpoint.from_block == 5  # written while block 5 waited
    assert body["checkpoint"]["id"] == 1
    assert body["contextBlock"] == checkpoint.context_block == first_calls[4].context_block
    assert body["messages"] == first_calls[4].messages


def test_a_block_whose_turn_recorded_no_context_is_409(api, story):
    from agents.models import Block

    Block.objects.filter(number=3).update(revision=None)

    response = api.get(f"{DM}/context?atBlock=3")

    assert response.status_code == 409
    assert error_of(response)["code"] == "history_not_recorded"


# --- checkpoints ------------------------------------------------------------------------------


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


def test_a_dropped_rewrite_shows_as_not_applied_with_why(api, agent, monkeypatch):
    compact_dropping_a_rewrite(api, agent, monkeypatch)

    [rewrite] = api.get(f"{DM}/checkpoints/1").json()["changes"]["rewrites"]
    assert (rewrite["applied"], rewrite["after"]) == (False, "Later.")
    assert "written after the compactor read it" in rewrite["note"]


@pytest.mark.parametrize("checkpoint", ["3", "0", "abc", "99999999999999"])
def test_a_checkpoint_the_agent_does_not_have_is_404(api, story, checkpoint):
    response = api.get(f"{DM}/checkpoints/{checkpoint}")

    assert response.status_code == 404
    assert error_of(response)["code"] == "checkpoint_not_found"


def test_an_agent_without_checkpoints_lists_none(api, agent):
    assert api.get(f"{DM}/checkpoints").json() == {"checkpoints": [], "nextCursor": None}


# --- who and how ------------------------------------------------------------------------------

READS = [
    "memories?atBlock=1",
    "memories/quest/history",
    "context?atBlock=1",
    "checkpoints",
    "checkpoints/1",
    "export",
]


@pytest.mark.parametrize("path", READS)
def test_the_time_reads_need_a_key_and_refuse_writes(anonymous, api, agent, path):
    assert anonymous.get(f"{DM}/{path}").status_code == 401
    for method in ("post", "put", "patch", "delete"):
        response = getattr(api, method)(f"{DM}/{path}")
        assert response.status_code == 405, (method, path)
        assert error_of(response)["code"] == "method_not_allowed"


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
