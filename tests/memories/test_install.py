"""Installing a whole store and its history at once — what an import and a
fork do for a new agent: through the store's rules like any other write
(the cap, maxOpenTokens, nothing closed that could never be opened), or
nothing at all."""

from datetime import UTC, datetime

import pytest
from django.db import transaction

from memories import store
from memories.models import Change, Memory, MemoryEvent, Writer

AT = datetime(2026, 11, 30, 12, tzinfo=UTC)


def words(count: int) -> str:
    """Text of exactly `count` tokens."""
    return "word" + " word" * (count - 1)


def memory(name: str, content: str, *, is_open: bool = False) -> Memory:
    return Memory(
        name=name,
        description=f"About {name}",
        content=content,
        is_open=is_open,
        version=3,
        updated_by=Writer.COMPACTOR,
        updated_at=AT,
    )


def created(name: str, content: str) -> MemoryEvent:
    after = {"description": f"About {name}", "content": content, "open": False, "version": 1}
    return MemoryEvent(name=name, change=Change.CREATED, by=Writer.AGENT, after=after, block=1, created_at=AT)


def install(agent, memories, history=()):
    with transaction.atomic():
        store.memories_install(agent=agent, memories=memories, history=list(history))


@pytest.fixture
def small_budget(define):
    return define("dm", max_open_tokens=10, max_tokens=1000)


def test_an_install_writes_the_store_counted_and_its_history_with_their_times(small_budget):
    install(
        small_budget,
        [memory("quest", words(6), is_open=True), memory("npcs", words(9))],
        [created("npcs", "x")],
    )

    quest, npcs = Memory.objects.filter(agent=small_budget).order_by("id")
    assert (quest.name, quest.tokens, quest.is_open, quest.version) == ("quest", 6, True, 3)
    assert quest.bytes == store.memory_bytes("quest", "About quest", words(6))
    assert (npcs.tokens, npcs.updated_at, npcs.updated_by) == (9, AT, Writer.COMPACTOR)
    assert store.open_tokens(small_budget) == 6
    event = MemoryEvent.objects.get(agent=small_budget)
    assert (event.name, event.change, event.created_at) == ("npcs", Change.CREATED, AT)


def test_open_memories_may_pass_max_open_tokens_as_a_compactor_leaves_them(small_budget):
    install(small_budget, [memory("quest", words(6), is_open=True), memory("world", words(5), is_open=True)])

    assert sum(Memory.objects.filter(is_open=True).values_list("tokens", flat=True)) == 11


def test_open_memories_reaching_half_of_max_tokens_are_refused_naming_the_one_that_does(define):
    agent = define("dm", max_open_tokens=400, max_tokens=1000)
    memories = [
        memory("quest", words(300), is_open=True),
        memory("npcs", "x"),
        memory("world", words(200), is_open=True),
    ]

    with pytest.raises(store.NotInstallable) as refused:
        install(agent, memories, [created("npcs", "x")])

    assert refused.value.index == 2
    assert isinstance(refused.value.refused, store.OverHalfOfMaxTokens)
    assert refused.value.message == "open memories would take 500 tokens, half of maxTokens (1,000) or more"
    assert not Memory.objects.exists() and not MemoryEvent.objects.exists()


def test_a_closed_memory_that_could_never_be_opened_is_refused(small_budget):
    with pytest.raises(store.NotInstallable) as refused:
        install(small_budget, [memory("quest", "x"), memory("npcs", words(11))])

    assert refused.value.index == 1
    assert isinstance(refused.value.refused, store.NeverOpenable)
    assert "11 tokens, more than the whole open budget of 10" in refused.value.message
    assert not Memory.objects.exists()


def test_an_open_memory_larger_than_the_whole_open_budget_is_refused_as_a_closed_one_is(small_budget):
    # Installed, the agent's plain close (never refused for its size) would
    # leave it closed for good: never openable, so never read again.
    with pytest.raises(store.NotInstallable) as refused:
        install(small_budget, [memory("quest", "x", is_open=True), memory("npcs", words(11), is_open=True)])

    assert refused.value.index == 1
    assert isinstance(refused.value.refused, store.NeverOpenable)
    assert refused.value.message == "'npcs' would be 11 tokens, more than the whole open budget of 10"
    assert not Memory.objects.exists()


def test_a_store_past_the_cap_is_refused_with_its_size(small_budget, studio_conf):
    studio_conf(STORE_CAP_BYTES=40)
    first = memory("quest", "x")  # 17 bytes

    with pytest.raises(store.NotInstallable) as refused:
        install(small_budget, [first, memory("npcs", "x" * 10)])  # 24 more

    facts = refused.value.refused
    assert (refused.value.index, facts.current, facts.after, facts.cap) == (1, 17, 41, 40)
    assert not Memory.objects.exists()
