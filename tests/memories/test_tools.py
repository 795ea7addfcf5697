"""Every rule and every error of the three memory tools, called as the
model calls them (the engine's transaction around each call included)."""

import json

import pytest
from django.db import transaction

from agents.history.as_of import store_replay
from memories import store
from memories.models import Change, Memory, MemoryEvent, Writer
from memories.tools import UnparsedArguments, tool_run


def run(agent, tool, **arguments):
    with transaction.atomic():
        return tool_run(agent=agent, name=tool, arguments=arguments)


def create(agent, name="quest", description="What the player wants now", content="Find the key."):
    result = run(agent, "close_memory", name=name, description=description, content=content)
    assert not result.is_error, result.text
    return Memory.objects.get(agent=agent, name=name)


# --- close_memory ------------------------------------------------------------------


def test_close_creates_a_new_memory_closed(agent):
    result = run(agent, "close_memory", name="quest", description="What now", content="Find the key.")

    assert not result.is_error
    memory = Memory.objects.get(agent=agent, name="quest")
    assert (memory.description, memory.content, memory.is_open) == ("What now", "Find the key.", False)
    assert memory.tokens == 4  # "Find the key." in cl100k
    assert memory.bytes == len("quest") + len("What now") + len("Find the key.")
    assert memory.updated_by == Writer.AGENT


@pytest.mark.parametrize("missing", ["description", "content"])
def test_a_new_memory_needs_description_and_content(agent, missing):
    arguments = {"name": "quest", "description": "What now", "content": "Find the key."}
    del arguments[missing]

    result = run(agent, "close_memory", **arguments)

    assert result.is_error
    assert f"{missing} is missing" in result.text
    assert not Memory.objects.filter(agent=agent).exists()


def test_closing_a_closed_memory_is_an_error_not_an_overwrite(agent):
    create(agent, content="Find the key.")

    result = run(agent, "close_memory", name="quest", content="Something else")

    assert result.is_error
    assert "open it with open_memory first" in result.text.lower()
    assert Memory.objects.get(name="quest").content == "Find the key."


def test_closing_an_open_memory_updates_only_the_fields_given(agent):
    create(agent, description="What now", content="Find the key.")
    run(agent, "open_memory", name="quest")

    result = run(agent, "close_memory", name="quest", content="Open the house.")

    assert not result.is_error
    memory = Memory.objects.get(name="quest")
    assert (memory.description, memory.content, memory.is_open) == ("What now", "Open the house.", False)
    assert memory.version == 2


def test_closing_an_open_memory_with_no_fields_just_closes_it(agent):
    create(agent)
    run(agent, "open_memory", name="quest")

    result = run(agent, "close_memory", name="quest")

    assert not result.is_error
    assert "nothing in it changed" in result.text
    assert Memory.objects.get(name="quest").is_open is False


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ({}, "needs 'name'"),
        ({"name": ""}, "non-empty 'name'"),
        ({"name": 7}, "'name' must be a string"),
        ({"name": "a\nb", "description": "d", "content": "c"}, "one line"),
        ({"name": "x" * 65, "description": "d", "content": "c"}, "at most 64"),
        ({"name": "q", "description": "two\nlines", "content": "c"}, "'description' is one line"),
        ({"name": "q", "description": "   ", "content": "c"}, "cannot be empty"),
        ({"name": "q", "description": "d", "content": ["c"]}, "'content' must be a string"),
    ],
)
def test_close_refuses_malformed_arguments(agent, arguments, fragment):
    result = run(agent, "close_memory", **arguments)

    assert result.is_error
    assert fragment in result.text
    assert not Memory.objects.exists()


def test_arguments_that_are_not_an_object_are_an_error(agent):
    with transaction.atomic():
        result = tool_run(agent=agent, name="open_memory", arguments=["quest"])

    assert result.is_error
    assert "object of arguments" in result.text


def test_a_memory_too_large_to_ever_open_is_refused(define):
    agent = define("small", max_open_tokens=10, max_tokens=1000)

    result = run(agent, "close_memory", name="quest", description="d", content="word " * 49 + "word")

    assert result.is_error
    assert "could never be opened" in result.text
    assert "50 tokens" in result.text and "budget of 10" in result.text


def test_the_compactor_never_grows_one_memory_past_the_whole_open_budget_so_a_plain_close_always_works(
    define,
):
    agent = define("small", max_open_tokens=10, max_tokens=1000)
    memory = create(agent, content="Find the key.")
    run(agent, "open_memory", name="quest")

    grown = store.memory_rewrite_by_compactor(
        agent=agent,
        name="quest",
        memory_id=memory.pk,
        version_read=memory.version,
        content="word " * 49 + "word",
    )
    closed = run(agent, "close_memory", name="quest")

    assert grown is None
    dropped = MemoryEvent.objects.get(agent=agent, change="dropped")
    assert "more than the whole open budget of 10" in dropped.note
    assert not closed.is_error and closed.text == "Closed memory 'quest' (nothing in it changed)."
    assert Memory.objects.get(name="quest").content == "Find the key."


def test_a_plain_close_is_never_refused_for_the_memorys_size(define):
    agent = define("small", max_open_tokens=10, max_tokens=1000)
    create(agent, content="Find the key.")
    run(agent, "open_memory", name="quest")
    # However it came to be larger than the budget (a store from before this rule).
    Memory.objects.filter(name="quest").update(content="word " * 49 + "word", tokens=50)

    closed = run(agent, "close_memory", name="quest")
    rewritten = run(agent, "close_memory", name="quest", content="word " * 20)

    assert not closed.is_error
    assert Memory.objects.get(name="quest").is_open is False
    assert rewritten.is_error  # closed: open it first


# --- open_memory ---------------------------------------------------------------------


def test_open_returns_the_full_content_and_marks_it_open(agent):
    create(agent, content="Retrieve the silver key.\nIt opens her sister's house.")

    result = run(agent, "open_memory", name="quest")

    assert not result.is_error
    assert result.text.endswith("Retrieve the silver key.\nIt opens her sister's house.")
    assert Memory.objects.get(name="quest").is_open


def test_opening_an_unknown_name_lists_the_names_that_exist(agent):
    create(agent, name="quest")
    create(agent, name="npcs")

    result = run(agent, "open_memory", name="inventory")

    assert result.is_error
    assert "no memory named 'inventory'" in result.text
    assert "quest, npcs" in result.text


def test_opening_with_no_memories_says_there_are_none(agent):
    result = run(agent, "open_memory", name="quest")

    assert result.is_error
    assert "no memories yet" in result.text


def test_opening_an_open_memory_is_reported_not_an_error(agent):
    create(agent, content="Find the key.")
    run(agent, "open_memory", name="quest")

    result = run(agent, "open_memory", name="quest")

    assert not result.is_error
    assert "already open" in result.text
    # Reported as such, not read out again: the agent has the content already.
    assert "Find the key." not in result.text


def test_opening_past_max_open_tokens_names_the_memories_to_close(define):
    agent = define("tight", max_open_tokens=12, max_tokens=1000)
    create(agent, name="quest", content="one two three four five six")  # 6 tokens
    create(agent, name="npcs", content="seven eight nine ten eleven twelve thirteen")  # 7 tokens
    run(agent, "open_memory", name="quest")

    result = run(agent, "open_memory", name="npcs")

    assert result.is_error
    assert "needs 7 tokens" in result.text
    assert "6 are already open" in result.text and "makes 13" in result.text
    assert "budget of 12" in result.text
    assert "quest (6 tokens)" in result.text
    assert Memory.objects.get(name="npcs").is_open is False


def test_open_budget_is_counted_in_content_tokens(define):
    agent = define("exact", max_open_tokens=13, max_tokens=1000)
    create(agent, name="quest", content="one two three four five six")
    create(agent, name="npcs", content="seven eight nine ten eleven twelve thirteen")
    run(agent, "open_memory", name="quest")

    result = run(agent, "open_memory", name="npcs")  # 6 + 7 = 13: exactly the budget

    assert not result.is_error


# --- delete_memory -------------------------------------------------------------------


def test_delete_requires_the_memory_open(agent):
    create(agent)

    result = run(agent, "delete_memory", name="quest")

    assert result.is_error
    assert "nothing is deleted unseen" in result.text
    assert Memory.objects.filter(name="quest").exists()


def test_delete_removes_an_open_memory_for_good(agent):
    create(agent)
    run(agent, "open_memory", name="quest")

    result = run(agent, "delete_memory", name="quest")

    assert not result.is_error
    assert not Memory.objects.filter(name="quest").exists()


def test_deleting_an_unknown_name_lists_the_names_that_exist(agent):
    create(agent, name="npcs")

    result = run(agent, "delete_memory", name="quest")

    assert result.is_error
    assert "The memories that exist are: npcs." in result.text


def test_an_unknown_tool_is_an_error_result(agent):
    result = run(agent, "forget_everything", name="quest")

    assert result.is_error
    assert "open_memory, close_memory, delete_memory" in result.text


# --- the store cap -----------------------------------------------------------------


def test_a_write_past_the_store_cap_is_refused_with_the_numbers(agent, studio_conf):
    studio_conf(STORE_CAP_BYTES=100)
    create(agent, name="a", description="d", content="x" * 60)  # 62 bytes

    result = run(agent, "close_memory", name="b", description="d", content="y" * 40)  # +42

    assert result.is_error
    assert "store is 62 bytes" in result.text
    assert "make it 104 bytes" in result.text
    assert "cap of 100 bytes" in result.text
    assert not Memory.objects.filter(name="b").exists()


def test_a_write_exactly_at_the_cap_is_allowed_and_shrinking_always_is(agent, studio_conf):
    studio_conf(STORE_CAP_BYTES=100)
    create(agent, name="a", description="d", content="x" * 98)  # 100 bytes: at the cap
    run(agent, "open_memory", name="a")

    result = run(agent, "close_memory", name="a", content="short")

    assert not result.is_error
    assert Memory.objects.get(name="a").bytes == 7


def test_the_default_store_cap_is_one_mebibyte(agent, api):
    response = api.get("/api/v1/agents/dm/memories")

    assert response.json()["storeCapBytes"] == 1_048_576


def test_store_bytes_count_utf8_of_name_description_and_content(agent):
    memory = create(agent, name="søster", description="Mara’s sister", content="Ænid — in Ashmere")

    assert memory.bytes == len("søster".encode()) + len("Mara’s sister".encode()) + len(
        "Ænid — in Ashmere".encode()
    )


# --- history of writes --------------------------------------------------------------


def test_every_change_is_kept_with_before_and_after(agent):
    create(agent, content="v1")
    run(agent, "open_memory", name="quest")
    run(agent, "close_memory", name="quest", content="v2")
    run(agent, "open_memory", name="quest")
    run(agent, "delete_memory", name="quest")

    events = list(MemoryEvent.objects.filter(agent=agent, name="quest"))

    assert [e.change for e in events] == [
        Change.CREATED,
        Change.OPENED,
        Change.UPDATED,
        Change.CLOSED,
        Change.OPENED,
        Change.DELETED,
    ]
    assert all(e.by == Writer.AGENT for e in events)
    assert events[0].before is None and events[0].after["content"] == "v1"
    assert events[2].before["content"] == "v1" and events[2].after["content"] == "v2"
    assert events[5].before["content"] == "v2" and events[5].after is None


def test_closing_an_open_memory_with_changes_is_kept_as_an_update_then_a_close(agent):
    create(agent, content="v1")
    run(agent, "open_memory", name="quest")

    run(agent, "close_memory", name="quest", content="v2")

    updated, closed = MemoryEvent.objects.filter(agent=agent, name="quest").order_by("-id")[:2][::-1]
    assert (updated.change, updated.before, updated.after) == (
        Change.UPDATED,
        {"content": "v1", "open": True, "version": 1},
        {"content": "v2", "open": True, "version": 2},
    )
    # The close keeps what it changed, not a third copy of the text.
    assert (closed.change, closed.before, closed.after) == (
        Change.CLOSED,
        {"open": True, "version": 2},
        {"open": False, "version": 2},
    )
    assert updated.turn_id == closed.turn_id


def test_opening_and_closing_a_large_memory_again_and_again_keeps_no_copy_of_it(agent):
    big = "The road north runs past the drowned chapel. " * 300  # ~13,500 characters
    create(agent, content=big)
    for _ in range(7):
        run(agent, "open_memory", name="quest")
        run(agent, "close_memory", name="quest")

    toggles = MemoryEvent.objects.filter(agent=agent, change__in=[Change.OPENED, Change.CLOSED])
    assert toggles.count() == 14
    kept = sum(len(json.dumps([event.before, event.after])) for event in toggles)
    assert kept < len(big) // 10
    # What was, at each of them, is still known: the store replayed from the history.
    assert [
        (m.content, m.is_open) for m in store_replay(MemoryEvent.objects.filter(agent=agent).order_by("id"))
    ] == [(big, False)]


def test_rewriting_a_large_memorys_description_again_and_again_keeps_no_copy_of_its_content(agent, designer):
    big = "The road north runs past the drowned chapel. " * 300  # ~13,500 characters
    create(agent, content=big)
    for n in range(7):
        run(agent, "open_memory", name="quest")
        run(agent, "close_memory", name="quest", description=f"What the player wants, take {n}")

    updates = MemoryEvent.objects.filter(agent=agent, change=Change.UPDATED)
    assert updates.count() == 7
    assert sum(len(json.dumps([event.before, event.after])) for event in updates) < len(big) // 10
    # The store as of each change is still known, and the page tells each change.
    assert [
        (m.description, m.content)
        for m in store_replay(MemoryEvent.objects.filter(agent=agent).order_by("id"))
    ] == [("What the player wants, take 6", big)]
    page = designer.get("/studio/ashmere/agents/dm/memories/").content.decode()
    assert "What the player wants, take 5" in page and "What the player wants, take 6" in page


def test_a_refused_call_changes_nothing_and_records_nothing(agent):
    create(agent)

    run(agent, "close_memory", name="quest", content="overwrite attempt")

    assert list(MemoryEvent.objects.values_list("change", flat=True)) == [Change.CREATED]


def test_arguments_that_are_broken_json_say_so(agent):
    with transaction.atomic():
        result = tool_run(agent=agent, name="open_memory", arguments=UnparsedArguments('{"name": "quest"'))

    assert result.is_error
    assert "were not valid JSON" in result.text


def test_opening_and_closing_unchanged_is_not_a_write(agent):
    memory = create(agent)
    written_at, version = memory.updated_at, memory.version

    run(agent, "open_memory", name="quest")
    run(agent, "close_memory", name="quest")

    memory.refresh_from_db()
    assert (memory.updated_at, memory.version, memory.updated_by) == (written_at, version, Writer.AGENT)


# --- names -------------------------------------------------------------------------


def test_a_name_written_one_way_and_opened_the_other_is_one_memory(agent):
    nfd, nfc = "cafe\u0301", "caf\u00e9"  # the same letters, two encodings
    result = run(
        agent, "close_memory", name=nfd, description="Where they meet", content="The innkeeper's café."
    )
    assert not result.is_error

    opened = run(agent, "open_memory", name=nfc)
    again = run(agent, "close_memory", name=nfd, description="Where they meet")

    assert not opened.is_error and "The innkeeper's café." in opened.text
    assert not again.is_error
    assert list(Memory.objects.filter(agent=agent).values_list("name", flat=True)) == [nfc]
