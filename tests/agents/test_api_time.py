"""Looking at an agent through time: the store and the context as of a
block, a memory's history, checkpoints and what each changed.

Here, the tests that need a commit or an agent of their own; those that
only look at the nine-block story are in story/test_api.py, which plays it
once."""

import importlib
from urllib.parse import quote

import pytest
from django.apps import apps

from agents.models import Agent, AgentRevision, Block, Checkpoint, Turn, TurnStatus
from agents.providers.scripted import ScriptedProvider
from agents.sending.turn_slot import turn_cancel
from memories.models import MemoryEvent
from tests.support.sending import turn_send
from tests.support.time_story import DM, MESSAGES, compact_dropping_a_rewrite, play

from ..conftest import UNTIL_CANCELLED, call, error_of, in_thread, script, wait_for

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


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", "", "99999999999"])
def test_an_at_block_that_is_not_a_block_number_is_400(api, agent, value):
    for path in ("memories", "context"):
        response = api.get(f"{DM}/{path}?atBlock={value}")

        assert response.status_code == 400
        assert "atBlock" in error_of(response)["message"]


def test_a_block_still_being_played_is_409_until_it_ends(api, agent):
    thread, _ = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
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


def test_a_memory_name_with_a_slash_has_its_history_too(api, agent):
    turn_send(
        agent=agent, content=script(call("close_memory", name="north/road", description="d", content="c"))
    )

    events = api.get(f"{DM}/memories/north/road/history").json()["events"]

    assert [(e["name"], e["change"]) for e in events] == [("north/road", "created")]


def test_a_memory_name_in_the_path_is_read_as_the_store_keeps_it(api, agent):
    turn_send(
        agent=agent, content=script(call("close_memory", name="caf\u00e9", description="d", content="c"))
    )

    decomposed = quote("cafe\u0301")
    events = api.get(f"{DM}/memories/{decomposed}/history").json()["events"]

    assert [(e["name"], e["change"]) for e in events] == [("caf\u00e9", "created")]


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


# --- checkpoints ------------------------------------------------------------------------------


def test_a_dropped_rewrite_shows_as_not_applied_with_why(api, agent, monkeypatch):
    compact_dropping_a_rewrite(api, agent, monkeypatch)

    [rewrite] = api.get(f"{DM}/checkpoints/1").json()["changes"]["rewrites"]
    assert (rewrite["applied"], rewrite["after"]) == (False, "Later.")
    assert "written after the compactor read it" in rewrite["note"]


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


def test_a_page_of_a_large_store_as_of_a_block_makes_models_of_that_page_only(api, define, monkeypatch):
    """The store as of a block is every change replayed; a page of it
    should not cost a model for each change and each memory of the store."""
    from memories.models import Memory

    store_of_block_one(define("dm"), 3_000)
    made = {"n": 0}
    for model in (Memory, MemoryEvent):
        init = model.__init__

        def counted(self, *args, _init=init, **kwargs):
            made["n"] += 1
            _init(self, *args, **kwargs)

        monkeypatch.setattr(model, "__init__", counted)

    body = api.get(f"{DM}/memories?atBlock=1&limit=50").json()

    assert [memory["name"] for memory in body["memories"]] == [f"m{n:04d}" for n in range(50)]
    assert body["storeBytes"] == 3_000 * (5 + 1 + 40)
    assert made["n"] < 100


def store_of_block_one(agent, memories: int) -> None:
    """`memories` created by block 1 of `agent`, as rows of changes."""
    MemoryEvent.objects.bulk_create(
        MemoryEvent(agent=agent, name=f"m{n:04d}", change="created", by="agent", block=1, after=MEMORY_AFTER)
        for n in range(memories)
    )
    Block.objects.create(agent=agent, number=1, status=TurnStatus.COMPLETED, entries=[])
    Agent.objects.filter(pk=agent.pk).update(last_block=1)


MEMORY_AFTER = {"description": "d", "content": "c" * 40, "open": False, "version": 1}


def pages_of(api, path: str) -> tuple[list[dict], list[dict]]:
    """Every page of a list in turn: the pages' bodies, and their items."""
    bodies, cursor = [], None
    while True:
        bodies.append(api.get(path + (f"&cursor={cursor}" if cursor else "")).json())
        cursor = bodies[-1]["nextCursor"]
        if cursor is None:
            return bodies, [memory for body in bodies for memory in body["memories"]]


@pytest.fixture
def replays(monkeypatch):
    """This process's replays, empty, and how many times a store was replayed."""
    from agents.history import as_of

    kept = as_of._Replays()
    monkeypatch.setattr(as_of, "_replays", kept)
    replayed = {"n": 0}
    replay = as_of._replayed

    def counted(*args, **kwargs):
        replayed["n"] += 1
        return replay(*args, **kwargs)

    monkeypatch.setattr(as_of, "_replayed", counted)
    return kept, replayed


def test_paging_through_a_store_as_of_a_block_replays_its_changes_once(api, define, replays):
    """A store of 3,000 memories in 60 pages: each page was a replay of
    every change, the square of the store's size in all."""
    _, replayed = replays
    store_of_block_one(define("dm"), 3_000)

    bodies, memories = pages_of(api, f"{DM}/memories?atBlock=1&limit=50")

    assert len(bodies) == 60
    assert [memory["name"] for memory in memories] == [f"m{n:04d}" for n in range(3_000)]
    assert {body["storeBytes"] for body in bodies} == {3_000 * (5 + 1 + 40)}
    assert replayed["n"] == 1


def test_a_change_counted_at_the_block_since_its_replay_is_read(api, define, replays):
    """A replay is kept under the changes it was made of: one more (here
    written at the block itself, as an import or a repair could) is a store
    read afresh, not the one kept."""
    _, replayed = replays
    agent = define("dm")
    store_of_block_one(agent, 10)
    assert len(pages_of(api, f"{DM}/memories?atBlock=1")[1]) == 10

    MemoryEvent.objects.create(
        agent=agent, name="late", change="created", by="game", block=1, after=MEMORY_AFTER
    )
    MemoryEvent.objects.create(agent=agent, name="m0003", change="deleted", by="game", block=1, after=None)

    names = [memory["name"] for memory in pages_of(api, f"{DM}/memories?atBlock=1")[1]]
    assert "late" in names and "m0003" not in names and len(names) == 10
    assert replayed["n"] == 2


def test_a_store_past_the_bound_of_kept_replays_is_replayed_for_each_page(api, define, replays, monkeypatch):
    kept, replayed = replays
    monkeypatch.setattr(kept, "most_bytes", 10_000)  # under the 100 memories' ~60 KB
    store_of_block_one(define("dm"), 100)

    bodies, memories = pages_of(api, f"{DM}/memories?atBlock=1&limit=50")

    assert [memory["name"] for memory in memories] == [f"m{n:04d}" for n in range(100)]
    assert replayed["n"] == len(bodies) == 2
    assert kept.kept == {} and kept.bytes == 0
