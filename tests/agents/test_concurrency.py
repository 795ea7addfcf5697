"""Many things at once, on the real database: parallel sends to one agent,
parallel memory writes racing the store cap and the open budget."""

import threading
from itertools import pairwise

import pytest
from django.db import connection, transaction

from agents.models import Block, Turn, TurnStatus
from billing.models import Account, Adjustment, CostLine
from memories.models import Memory
from memories.store import open_tokens, store_bytes
from memories.tools import tool_run
from tests.support.sending import turn_send

from ..conftest import call, script

pytestmark = pytest.mark.django_db(transaction=True)


def all_at_once(count, fn):
    """Run fn(i) in `count` threads released together; return the results."""
    barrier = threading.Barrier(count)
    results, errors = [None] * count, []

    def target(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


def test_parallel_sends_to_one_agent_all_complete_with_contiguous_blocks(define):
    agent = define("dm")

    turns = all_at_once(
        8,
        lambda i: turn_send(
            agent=agent,
            content=script(call("open_memory", name="nothing"), {"say": f"reply {i}"}),
        ),
    )

    assert all(t.status == TurnStatus.COMPLETED for t in turns)
    blocks = list(Block.objects.filter(agent=agent).order_by("number"))
    assert [b.number for b in blocks] == list(range(1, 9))
    assert sorted(b.entries[-1]["content"] for b in blocks) == sorted(f"reply {i}" for i in range(8))
    # Each block holds exactly its own turn: message, one call, reply.
    assert all([e["type"] for e in b.entries] == ["message", "tool_call", "message"] for b in blocks)
    agent.refresh_from_db()
    assert agent.last_block == 8


def test_parallel_sends_never_overlap(define):
    agent = define("dm")

    all_at_once(5, lambda i: turn_send(agent=agent, content=script({"sleep": 0.05}, {"say": str(i)})))

    turns = sorted(Turn.objects.filter(agent=agent), key=lambda t: t.started_at)
    for before, after in pairwise(turns):
        assert after.started_at >= before.ended_at


def test_parallel_sends_lose_no_cost_line_and_the_ledger_balances(define, game):
    agent = define("dm")

    all_at_once(
        6, lambda i: turn_send(agent=agent, content=script(call("open_memory", name="x"), {"say": "ok"}))
    )

    spent = sum(line.amount for line in CostLine.objects.filter(game=game))
    credited = sum(a.amount for a in Adjustment.objects.filter(game=game))
    assert Account.objects.get(game=game).balance == credited - spent
    assert CostLine.objects.filter(kind="memory_access").count() == 6
    assert sum(CostLine.objects.filter(kind="memory_access").values_list("quantity", flat=True)) == 6


def test_parallel_writes_can_never_take_the_store_past_its_cap(define, studio_conf):
    studio_conf(STORE_CAP_BYTES=1000)
    agent = define("dm")

    def write(i):
        with transaction.atomic():
            # 3 + 1 + 296 = 300 bytes each: only three fit under 1000.
            return tool_run(
                agent=agent,
                name="close_memory",
                arguments={"name": f"m{i:02d}", "description": "d", "content": "x" * 296},
            )

    results = all_at_once(8, write)

    assert sum(not r.is_error for r in results) == 3
    assert store_bytes(agent) == 900
    refusals = [r.text for r in results if r.is_error]
    assert all("store is 900 bytes" in text and "cap of 1,000 bytes" in text for text in refusals)


def test_parallel_opens_can_never_take_open_memories_past_the_budget(define):
    agent = define("dm", max_open_tokens=30, max_tokens=1000)
    for i in range(8):
        with transaction.atomic():
            tool_run(
                agent=agent,
                name="close_memory",
                arguments={"name": f"m{i}", "description": "d", "content": "word " * 9 + "word"},
            )  # 10 tokens each: three fit in 30

    def open_one(i):
        with transaction.atomic():
            return tool_run(agent=agent, name="open_memory", arguments={"name": f"m{i}"})

    results = all_at_once(8, open_one)

    assert sum(not r.is_error for r in results) == 3
    assert open_tokens(agent) == 30
    assert Memory.objects.filter(agent=agent, is_open=True).count() == 3
