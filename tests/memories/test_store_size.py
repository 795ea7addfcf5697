"""The store cap is checked against the agent's kept store size, moved by
every write of memories.store: a write reads one number, not the whole
store, however many memories a model is steered into keeping — and the
number is always the store's memories summed, whoever wrote them."""

import io

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from agents.compaction import compaction_request
from agents.models import Agent, CompactionReason
from memories import store
from memories.models import Memory
from memories.tools import tool_run
from tests.support.agent_file import exported
from tests.support.sending import turn_send
from tests.support.time_story import DM

from ..conftest import call, script

pytestmark = pytest.mark.django_db(transaction=True)


def run(agent, tool, **arguments):
    with transaction.atomic():
        return tool_run(agent=agent, name=tool, arguments=arguments)


def kept(agent) -> int:
    return Agent.objects.values_list("store_size", flat=True).get(pk=agent.pk)


def assert_kept_is_summed(*agents):
    for agent in agents:
        assert kept(agent) == store.store_bytes(agent), agent.name


def memory_rows_read() -> int:
    """Rows of the memories table this connection has read, as PostgreSQL
    counts them (counts not yet flushed included: take a difference)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
            " WHERE relname = 'memories_memory'"
        )
        return cursor.fetchone()[0]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="reads PostgreSQL's count of rows read")
def test_a_write_in_a_store_of_thousands_reads_no_more_of_it_than_in_a_small_one(agent):
    Memory.objects.bulk_create(
        Memory(agent=agent, name=f"n{n:05d}", description="d", content="c", bytes=3) for n in range(3_000)
    )
    assert store.store_sizes_recount() == 1

    with transaction.atomic():
        before = memory_rows_read()
        written = tool_run(
            agent=agent, name="close_memory", arguments={"name": "new", "description": "d", "content": "c"}
        )
        rows_read = memory_rows_read() - before

    assert not written.is_error, written.text
    assert rows_read < 10
    assert_kept_is_summed(agent)


def test_the_cap_is_checked_against_the_kept_size(agent, studio_conf):
    assert not run(agent, "close_memory", name="a", description="d", content="x" * 500).is_error
    studio_conf(STORE_CAP_BYTES=kept(agent) + 100)

    refused = run(agent, "close_memory", name="b", description="d", content="y" * 200)
    fits = run(agent, "close_memory", name="c", description="d", content="y" * 90)

    assert refused.is_error and "over the cap" in refused.text
    assert not fits.is_error, fits.text
    assert_kept_is_summed(agent)


def test_every_kind_of_write_keeps_the_size_the_sum_of_the_store(agent, api, admin_api):
    quest = {"name": "quest", "description": "What the player wants now", "content": "Find the key."}
    turn_send(agent=agent, content=script(call("close_memory", **quest), call("open_memory", name="quest")))
    run(agent, "close_memory", name="lore", description="Old tales", content="A long tale. " * 40)
    run(agent, "open_memory", name="lore")
    run(agent, "close_memory", name="lore", content="Short now.")  # smaller
    run(agent, "close_memory", name="gone", description="d", content="soon")
    run(agent, "open_memory", name="gone")
    run(agent, "delete_memory", name="gone")
    assert_kept_is_summed(agent)

    # The compactor's rewrite of an open memory.
    turn_send(agent=agent, content="@memory quest: Open the house in Ashmere, and the cellar under it.")
    turn_send(agent=agent, content="newest")
    compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    assert Memory.objects.get(agent=agent, name="quest").content.startswith("Open the house")
    assert_kept_is_summed(agent)

    # A fork, an export imported, and a store summed again that was off.
    assert api.post(f"{DM}/fork", {"name": "dm-fork", "atBlock": 2}, format="json").status_code == 201
    document = exported(api.get(f"{DM}/export"))
    assert (
        admin_api.post("/api/v1/agents/import", {**document, "name": "dm-copy"}, format="json").status_code
        == 201
    )
    fork, copy = Agent.objects.get(name="dm-fork"), Agent.objects.get(name="dm-copy")
    assert kept(fork) > 0 and kept(copy) == kept(agent)
    Agent.objects.filter(pk=agent.pk).update(store_size=7)
    said = io.StringIO()
    call_command("store_recount", stdout=said)
    assert said.getvalue().strip() == "recounted the store size of 1 agent"
    assert_kept_is_summed(agent, fork, copy)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has one writer: nothing runs beside it")
def test_a_recount_beside_a_write_leaves_the_size_the_sum(agent):
    """A write holding its store's lock when a recount reaches that agent,
    whose size was off: the recount waits for it and counts what it wrote."""
    import threading

    from memories.store import lock_store, memory_save, store_sizes_recount

    from ..conftest import in_thread, wait_for

    Agent.objects.filter(pk=agent.pk).update(store_size=7)
    written, commit = threading.Event(), threading.Event()

    def write():
        try:
            with transaction.atomic():
                locked = lock_store(agent)
                memory_save(
                    Memory(agent=locked, name="late", is_open=False),
                    by="agent",
                    description="d",
                    content="x" * 500,
                )
                written.set()
                commit.wait(60)
        finally:
            connection.close()

    writer, _ = in_thread(write)
    assert written.wait(60)
    recount, box = in_thread(store_sizes_recount)
    wait_for(lambda: waiting_on_a_lock() >= 1)  # the recount has reached the written agent's row
    commit.set()
    writer.join(60)
    recount.join(60)

    assert "error" not in box, box
    assert_kept_is_summed(agent)


def waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]
