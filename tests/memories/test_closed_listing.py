"""The closed memories' listing is bounded: however many memories a model
is steered into making, the context block lists the most recently written
that fit in a share of maxTokens and counts the rest, so the store never
locks its agent out of its own context, and a checkpoint's size does not
grow with the store."""

import pytest
from django.db import connection, transaction

from agents.compaction import compaction_request
from agents.models import Checkpoint, CompactionReason, TurnStatus
from agents.sending.context import closed_listing
from memories.models import Memory
from memories.tools import tool_run
from tests.support.agent_file import exported as read_export
from tests.support.pages import html
from tests.support.sending import turn_send
from tests.support.time_story import DM

from ..conftest import call, script

pytestmark = pytest.mark.django_db(transaction=True)

IMPORT = "/api/v1/agents/import"


def run(agent, tool, **arguments):
    with transaction.atomic():
        return tool_run(agent=agent, name=tool, arguments=arguments)


def closed_memories(agent, count, *, description_chars=300, first=0):
    """`count` closed memories (numbered from `first`), each with a
    description as long as the tool takes, made as the model makes them."""
    for n in range(first, first + count):
        result = run(
            agent,
            "close_memory",
            name=f"m{n:03d}",
            description=f"Memory {n:03d} " + "lore " * ((description_chars - 13) // 5),
            content=f"Fact {n}.",
        )
        assert not result.is_error, result.text


@pytest.fixture
def small(define):
    """An 8,000-token agent with two blocks of history to fold."""
    agent = define("dm", max_tokens=8000, max_open_tokens=1000)
    turn_send(agent=agent, content="first")
    turn_send(agent=agent, content="second")
    return agent


def checkpoint_now(agent):
    compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    return Checkpoint.objects.filter(agent=agent).order_by("-id").first()


def checkpointed_and_sent(agent):
    """A checkpoint written after two sends, and the turn of a send after it."""
    turn_send(agent=agent, content="The bells ring.")
    turn_send(agent=agent, content="The ferry waits.")
    checkpoint = checkpoint_now(agent)
    return checkpoint, turn_send(agent=agent, content="Who is on the ferry?")


@pytest.mark.slow  # heavy by design: 150 tool calls; left out of `make test-fast` (#38)
def test_hundreds_of_closed_memories_do_not_lock_a_small_agent_out(define):
    agent = define("dm", max_tokens=8000, max_open_tokens=1000)
    closed_memories(agent, 150)

    checkpoint, turn = checkpointed_and_sent(agent)

    assert turn.status == TurnStatus.COMPLETED, turn.error
    assert checkpoint.block_tokens <= 0.15 * agent.max_tokens
    # It can still open and delete what the listing leaves out.
    turn = turn_send(agent=agent, content=script(call("open_memory", name="m000"), {"say": "ok"}))
    assert turn.status == TurnStatus.COMPLETED
    assert Memory.objects.get(agent=agent, name="m000").is_open


def test_the_listing_shows_the_most_recently_written_and_counts_the_rest(small):
    agent = small
    closed_memories(agent, 60)
    run(agent, "open_memory", name="m000")
    run(agent, "close_memory", name="m000", content="Fact 0, rewritten.")  # written last

    checkpoint = checkpoint_now(agent)

    listed = [m["name"] for m in checkpoint.closed_memories]
    assert 0 < len(listed) < 60
    assert checkpoint.closed_unlisted == 60 - len(listed)
    # The newest written, in the order they were made.
    assert listed == ["m000", *[f"m{n:03d}" for n in range(61 - len(listed), 60)]]
    assert checkpoint.context_block.endswith(
        f"- … and {checkpoint.closed_unlisted} more, written longest ago: open_memory opens any of them "
        "by name.\n\n[End of context]"
    )


def test_the_agents_page_counts_what_the_checkpoint_does_not_list(small, designer):
    closed_memories(small, 60)
    checkpoint = checkpoint_now(small)

    page = html(designer.get("/studio/ashmere/agents/dm/"))

    assert 'Closed memories <span class="muted">(60)</span>' in page
    assert f"… and {checkpoint.closed_unlisted} more, written longest ago" in page


@pytest.mark.slow  # heavy by design: 240 tool calls; left out of `make test-fast` (#38)
def test_a_checkpoint_stays_the_same_size_however_many_memories_are_closed(small):
    agent = small
    closed_memories(agent, 40)
    fewer = checkpoint_now(agent)
    closed_memories(agent, 200, first=40)
    turn_send(agent=agent, content="third")

    more = checkpoint_now(agent)

    assert more.closed_unlisted > fewer.closed_unlisted
    assert len(more.context_block) <= len(fewer.context_block) * 1.1
    assert len(more.closed_memories) <= len(fewer.closed_memories) + 1


def test_a_short_listing_is_whole(agent):
    closed_memories(agent, 3, description_chars=40)
    turn_send(agent=agent, content="first")
    turn_send(agent=agent, content="second")

    checkpoint = checkpoint_now(agent)

    assert [m["name"] for m in checkpoint.closed_memories] == ["m000", "m001", "m002"]
    assert checkpoint.closed_unlisted == 0
    assert "written longest ago" not in checkpoint.context_block


@pytest.mark.slow  # heavy by design: 400 tool calls; left out of `make test-fast` (#38)
def test_open_memory_of_an_unknown_name_lists_a_bounded_number_of_names(agent):
    for n in range(400):
        run(agent, "close_memory", name=f"{n:03d}-" + "x" * 60, description="d", content="c")

    result = run(agent, "open_memory", name="nowhere")

    assert result.is_error
    assert len(result.text) < 4_000
    shown = result.text.count("-xxxx")
    assert 10 < shown < 400
    assert f"and {400 - shown} more written longer ago" in result.text


def test_a_cut_listing_round_trips_through_an_agent_file(api, admin_api, small):
    closed_memories(small, 60)
    checkpoint = checkpoint_now(small)
    document = read_export(api.get(f"{DM}/export"))
    assert document["checkpoints"][-1]["closedUnlisted"] == checkpoint.closed_unlisted
    assert admin_api.delete(DM).status_code == 204

    assert admin_api.post(IMPORT, document, format="json").status_code == 201

    imported = Checkpoint.objects.filter(agent__name="dm").order_by("-id").first()
    assert imported.context_block == checkpoint.context_block
    assert imported.closed_unlisted == checkpoint.closed_unlisted


# --- open memories' headings ------------------------------------------------------------------


@pytest.mark.slow  # heavy by design: hundreds of tool calls, twice; left out of `make test-fast` (#38)
@pytest.mark.parametrize("content", ["", "x"])
def test_many_small_open_memories_do_not_lock_a_small_agent_out(define, content):
    # Empty or one-token memories cost next to nothing of maxOpenTokens, yet
    # each open one shows its heading (name and description) in full.
    agent = define("dm", max_tokens=8000, max_open_tokens=1000)
    refused = None
    for n in range(150):
        name = f"m{n:03d}"
        made = run(
            agent, "close_memory", name=name, description=f"Memory {n:03d} " + "lore " * 57, content=content
        )
        assert not made.is_error, made.text
        opened = run(agent, "open_memory", name=name)
        refused = refused or (opened.text if opened.is_error else None)

    checkpoint, turn = checkpointed_and_sent(agent)

    assert turn.status == TurnStatus.COMPLETED, turn.error
    assert checkpoint.block_tokens <= 0.25 * agent.max_tokens
    assert "headings" in refused and "Close one of the open memories first" in refused


@pytest.mark.slow  # heavy by design: 800 tool calls; left out of `make test-fast` (#38)
def test_an_open_refused_for_the_budget_names_a_bounded_number_of_open_memories(define):
    agent = define("dm", max_tokens=200_000, max_open_tokens=1000)
    assert not run(agent, "close_memory", name="big", description="d", content="lore " * 990).is_error
    assert not run(
        agent, "close_memory", name="small", description="d", content="one more fact. " * 10
    ).is_error
    assert not run(agent, "open_memory", name="big").is_error
    for n in range(400):
        name = f"{n:03d}-" + "x" * 60
        assert not run(agent, "close_memory", name=name, description="d", content="").is_error
        assert not run(agent, "open_memory", name=name).is_error

    result = run(agent, "open_memory", name="small")

    assert result.is_error and "Cannot open 'small'" in result.text
    assert len(result.text) < 4_000
    assert "more open" in result.text


def test_a_memory_whose_heading_alone_passes_the_share_can_still_be_opened_and_deleted(define):
    agent = define("dm", max_tokens=2000, max_open_tokens=500)  # 200 tokens for headings
    assert not run(agent, "close_memory", name="big", description="😀" * 300, content="x").is_error

    opened = run(agent, "open_memory", name="big")

    assert not opened.is_error, opened.text
    assert not run(agent, "delete_memory", name="big").is_error


def test_one_heading_past_the_share_is_left_out_of_the_listing_not_the_others(define):
    agent = define("dm", max_tokens=4000, max_open_tokens=1000)
    for n in range(5):
        assert not run(agent, "close_memory", name=f"m{n}", description="short", content="c").is_error
    assert not run(agent, "close_memory", name="big", description="😀" * 300, content="x").is_error

    listed, unlisted = closed_listing(agent)

    assert ([m["name"] for m in listed], unlisted) == (["m0", "m1", "m2", "m3", "m4"], 1)


class RowsRead:
    """The most rows any one statement on the connection read."""

    def __init__(self):
        self.most = 0

    def __call__(self, execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if context["cursor"].description is not None:  # a statement that returns rows
            self.most = max(self.most, context["cursor"].rowcount)
        return result


def memories_made(agent, count: int, *, is_open: bool = False) -> None:
    """`count` small memories, written straight to the table (the tool's own
    path is timed elsewhere): the store as a model could have left it."""
    Memory.objects.bulk_create(
        Memory(agent=agent, name=f"n{n:05d}", description="d", content="c", is_open=is_open, bytes=3)
        for n in range(count)
    )


ROW_COUNTS = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite's cursor does not count the rows a SELECT read"
)


@ROW_COUNTS
def test_an_unknown_name_in_a_store_of_thousands_reads_only_the_names_it_can_show(agent):
    from memories.tools import LISTED_MAX_CHARS

    memories_made(agent, 3_000)
    rows = RowsRead()

    with connection.execute_wrapper(rows):
        result = run(agent, "open_memory", name="nowhere")

    assert result.is_error
    shown = result.text.count(", n") + 1
    assert f"and {3_000 - shown:,} more written longer ago" in result.text
    assert 0 < rows.most <= LISTED_MAX_CHARS // 3 + 1  # a name and its ", " take 3 characters at the least


def test_past_the_count_bound_a_refusal_says_over_how_many(agent, monkeypatch):
    from memories import store

    monkeypatch.setattr(store, "NAMES_COUNTED_MOST", 1_000)
    memories_made(agent, 1_500)

    result = run(agent, "open_memory", name="nowhere")

    shown = result.text.count(", n") + 1
    assert f"and over {1_000 - shown:,} more written longer ago." in result.text


@ROW_COUNTS
def test_a_checkpoint_reads_only_the_closed_memories_its_budget_could_list(define):
    agent = define("dm", max_tokens=2_000, max_open_tokens=500)  # 200 tokens for the listing
    memories_made(agent, 3_000)
    rows = RowsRead()

    with connection.execute_wrapper(rows):
        listed, unlisted = closed_listing(agent)

    assert len(listed) + unlisted == 3_000
    assert 0 < len(listed) < 200 // 5
    assert 0 < rows.most <= 200 // 5 + 1
