"""The compactor's rewrites of open memories: maxOpenTokens is a guideline
the open memories together may pass; the hard limits (the store cap, open
content below half of maxTokens, no one memory larger than the whole budget)
and the non-blind-write rule drop a rewrite, and the drop is kept in the
memory's history with its reason."""

import pytest
from django.db import transaction

from memories import store
from memories.models import Change, Memory, MemoryEvent, Writer
from memories.tools import tool_run


def words(count: int) -> str:
    """Text of exactly `count` tokens."""
    return "word" + " word" * (count - 1)


def run(agent, tool, **arguments):
    with transaction.atomic():
        result = tool_run(agent=agent, name=tool, arguments=arguments)
    assert not result.is_error, result.text
    return result


def rewrite(agent, content: str):
    quest = Memory.objects.get(agent=agent, name="quest")
    return store.memory_rewrite_by_compactor(
        agent=agent, name="quest", memory_id=quest.pk, version_read=quest.version, content=content
    )


@pytest.fixture
def quest_and_npcs_open(define):
    """Two open memories of 4 tokens each: the whole budget of 8."""
    return _quest_and_npcs(define("dm", max_open_tokens=8, max_tokens=1000))


@pytest.fixture
def quest_and_npcs_in_a_large_budget(define):
    """The same two memories, in a budget just under half of maxTokens."""
    return _quest_and_npcs(define("dm", max_open_tokens=499, max_tokens=1000))


def _quest_and_npcs(agent):
    run(agent, "close_memory", name="quest", description="What the player wants", content="Find the key.")
    run(agent, "close_memory", name="npcs", description="Who Mara met", content="He is wary.")
    run(agent, "open_memory", name="quest")
    run(agent, "open_memory", name="npcs")
    assert store.open_tokens(agent) == 8
    return agent


def test_a_compactor_rewrite_that_takes_the_open_memories_past_max_open_tokens_is_kept(quest_and_npcs_open):
    agent = quest_and_npcs_open

    assert rewrite(agent, words(8)) is not None

    quest = Memory.objects.get(agent=agent, name="quest")
    assert (quest.content, quest.tokens, quest.updated_by) == (words(8), 8, Writer.COMPACTOR)
    assert store.open_tokens(agent) == 12  # past maxOpenTokens 8: a guideline
    assert not MemoryEvent.objects.filter(change=Change.DROPPED).exists()


def test_a_compactor_rewrite_that_makes_one_memory_larger_than_the_whole_budget_is_dropped(
    quest_and_npcs_open,
):
    agent = quest_and_npcs_open

    assert rewrite(agent, words(9)) is None

    assert Memory.objects.get(agent=agent, name="quest").content == "Find the key."
    dropped = MemoryEvent.objects.get(change=Change.DROPPED)
    assert dropped.note == "'quest' would be 9 tokens, more than the whole open budget of 8"


@pytest.mark.parametrize("tokens, kept", [(495, True), (496, False)])
def test_a_compactor_rewrite_is_dropped_once_open_memories_would_reach_half_of_max_tokens(
    quest_and_npcs_in_a_large_budget, tokens, kept
):
    agent = quest_and_npcs_in_a_large_budget  # npcs holds 4 open tokens beside quest

    applied = rewrite(agent, words(tokens))

    assert (applied is not None) == kept
    assert (Memory.objects.get(agent=agent, name="quest").tokens == tokens) == kept
    dropped = MemoryEvent.objects.filter(change=Change.DROPPED).first()
    if kept:
        assert dropped is None
    else:
        assert dropped.by == Writer.COMPACTOR
        assert dropped.note == "open memories would take 500 tokens, half of maxTokens (1,000) or more"
        assert dropped.after == {"content": words(tokens)}


def test_a_compactor_rewrite_past_the_store_cap_is_dropped(quest_and_npcs_open, studio_conf):
    agent = quest_and_npcs_open
    studio_conf(STORE_CAP_BYTES=store.store_bytes(agent) + 10)

    assert rewrite(agent, "Find the key" + "!" * 12) is None

    assert Memory.objects.get(agent=agent, name="quest").content == "Find the key."
    note = MemoryEvent.objects.get(change=Change.DROPPED).note
    assert (
        note
        == f"the store would grow to {store.store_bytes(agent) + 11} bytes, over the cap of {store.store_bytes(agent) + 10}"
    )
