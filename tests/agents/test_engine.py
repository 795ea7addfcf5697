"""The send loop: tool calls recorded in order, cancel, failure, the turn
slot (one turn per agent at a time, in arrival order), dead turns."""

from datetime import timedelta
from itertools import pairwise

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent, Block, Turn, TurnStatus
from agents.sending import leases
from agents.sending.turn_slot import turn_cancel
from agents.wire import turn_tool_calls
from billing.models import Account, CostLine
from memories.models import Memory
from studio.errors import NotFound
from studio.runtime import wakeups
from tests.support.sending import turn_send

from ..conftest import UNTIL_CANCELLED, call, error_of, in_thread, script, wait_for


def test_each_tool_call_and_its_result_is_recorded_in_order(agent):
    turn = turn_send(
        agent=agent,
        content=script(
            call("close_memory", name="quest", description="Now", content="Find the key."),
            call("open_memory", name="nope"),
            call("open_memory", name="quest"),
            {"say": "Onward."},
        ),
    )

    entries = Block.objects.get(turn=turn).entries
    assert [(e["type"], e.get("name") or e["role"]) for e in entries] == [
        ("message", "user"),
        ("tool_call", "close_memory"),
        ("tool_call", "open_memory"),
        ("tool_call", "open_memory"),
        ("message", "assistant"),
    ]
    assert [e.get("isError") for e in entries[1:4]] == [False, True, False]
    assert entries[-1]["content"] == "Onward."


def test_a_transient_send_leaves_no_trace(agent):
    turn_send(agent=agent, content="before")

    turn = turn_send(
        agent=agent,
        content=script(call("close_memory", name="q", description="d", content="c"), {"say": "hi"}),
        transient=True,
    )

    assert (turn.status, turn.block_number, turn.reply) == (TurnStatus.COMPLETED, None, "hi")
    assert Block.objects.filter(agent=agent).count() == 1
    assert not Memory.objects.exists()
    agent.refresh_from_db()
    assert agent.last_block == 1


def test_a_transient_send_sees_the_history(agent):
    turn_send(agent=agent, content="The password is swordfish.")
    seen = {}

    from agents.providers.scripted import ScriptedProvider

    original = ScriptedProvider.complete

    def spy(self, request, control):
        seen["messages"] = [m["content"] for m in request.messages]
        seen["tools"] = request.tools
        return original(self, request, control)

    ScriptedProvider.complete = spy
    try:
        turn_send(agent=agent, content="What was the password?", transient=True)
    finally:
        ScriptedProvider.complete = original

    assert "The password is swordfish." in seen["messages"]
    assert seen["messages"][-1] == "What was the password?"
    assert seen["tools"] == []


def test_a_failing_model_call_ends_the_turn_failed_and_keeps_what_was_done(agent):
    turn = turn_send(
        agent=agent,
        content=script(
            call("close_memory", name="quest", description="Now", content="Kept."),
            {"fail": "provider is down"},
        ),
    )

    assert turn.status == TurnStatus.FAILED
    assert "provider is down" in turn.error
    assert Memory.objects.get(name="quest").content == "Kept."
    block = Block.objects.get(turn=turn)
    assert block.status == TurnStatus.FAILED
    assert [e["type"] for e in block.entries] == ["message", "tool_call"]
    assert CostLine.objects.get(turn_id=turn.uuid, kind="memory_access").quantity == 1


def test_the_next_send_works_after_a_failed_one(agent):
    turn_send(agent=agent, content=script({"fail": "boom"}))

    turn = turn_send(agent=agent, content="still there?")

    assert turn.status == TurnStatus.COMPLETED
    assert turn.block_number == 2


@pytest.mark.django_db(transaction=True)
def test_a_sleep_step_of_a_minute_ends_at_the_cap(game, define, studio_conf):
    # The cap is 10 s by default (tests/agents/test_scripted.py); half a second here.
    studio_conf(SCRIPTED_SLEEP_MAX_SECONDS=0.5)
    agent = define("dm")

    thread, box = in_thread(turn_send, agent=agent, content=script({"sleep": 60}, {"say": "awake"}))
    thread.join(10)
    if thread.is_alive():  # the cap did not hold: stop the turn rather than wait out the minute
        turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
        thread.join(10)

    turn = box["result"]
    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "awake")


@pytest.mark.django_db(transaction=True)
def test_cancel_ends_a_running_turn_and_keeps_its_block(game, define):
    agent = define("dm")
    thread, box = in_thread(
        turn_send,
        agent=agent,
        content=script(
            call("close_memory", name="quest", description="Now", content="Kept."),
            UNTIL_CANCELLED,
            {"say": "never"},
        ),
    )
    wait_for(
        lambda: [c for t in Turn.objects.filter(agent=agent, status="running") for c in turn_tool_calls(t)]
    )
    running = Turn.objects.get(agent=agent, status=TurnStatus.RUNNING)

    turn_cancel(running)
    thread.join(10)

    assert not thread.is_alive()
    turn = box["result"]
    assert turn.status == TurnStatus.CANCELLED
    block = Block.objects.get(turn=turn)
    assert block.status == TurnStatus.CANCELLED
    assert [e["type"] for e in block.entries] == ["message", "tool_call"]
    assert Memory.objects.get(name="quest").content == "Kept."


def _looks_only_when_woken_by_name(monkeypatch, studio_conf):
    """A running turn looks at its row only when a wake-up names it: not by
    itself (nor when its lease is renewed: `leases`), nor when the
    wake-ups' subscriber (re)connects and wakes every waiter."""
    monkeypatch.setattr(leases, "RENEW_SECONDS", 3600)
    studio_conf(TURN_LEASE_SECONDS=3 * 3600)
    wake = wakeups._waiters.wake
    monkeypatch.setattr(wakeups._waiters, "wake", lambda key=None: key is not None and wake(key))


@pytest.mark.django_db(transaction=True)
def test_a_cancel_wakes_a_turn_waiting_on_its_model_before_its_next_look(
    game, define, monkeypatch, studio_conf
):
    _looks_only_when_woken_by_name(monkeypatch, studio_conf)
    agent = define("dm")
    thread, box = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    thread.join(60)

    assert not thread.is_alive()
    assert box["result"].status == TurnStatus.CANCELLED


def test_a_turn_waiting_on_its_model_does_not_look_at_its_row_unless_woken(agent, monkeypatch, studio_conf):
    _looks_only_when_woken_by_name(monkeypatch, studio_conf)

    def statements(content):
        with CaptureQueriesContext(connection) as captured:
            turn = turn_send(agent=agent, content=content)
        assert turn.status == TurnStatus.COMPLETED
        return len(captured.captured_queries)

    quick = statements(script({"say": "awake"}))
    slow = statements(script({"sleep": 1}, {"say": "awake"}))

    assert slow == quick  # nothing more while it waited a second on its model


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_queued_send_never_runs(game, define):
    agent = define("dm")
    first, first_box = in_thread(turn_send, agent=agent, content=script({"sleep": 0.6}, {"say": "first"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    second, second_box = in_thread(turn_send, agent=agent, content="second")
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.QUEUED).exists())

    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.QUEUED))
    first.join(10)
    second.join(10)

    assert second_box["result"].status == TurnStatus.CANCELLED
    assert second_box["result"].block_number is None
    assert first_box["result"].block_number == 1
    assert list(Block.objects.filter(agent=agent).values_list("number", flat=True)) == [1]


@pytest.mark.django_db(transaction=True)
def test_sends_to_one_agent_run_one_at_a_time_in_arrival_order(game, define):
    agent = define("dm")
    first, _ = in_thread(turn_send, agent=agent, content=script({"sleep": 0.5}, {"say": "one"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    later = []
    for n in range(2, 5):
        later.append(in_thread(turn_send, agent=agent, content=f"message {n}"))
        wait_for(lambda n=n: Turn.objects.filter(agent=agent).count() == n)
    for thread, _ in [(first, None), *later]:
        thread.join(20)

    blocks = list(Block.objects.filter(agent=agent).order_by("number"))
    assert [b.entries[0]["content"] for b in blocks[1:]] == ["message 2", "message 3", "message 4"]
    turns = list(Turn.objects.filter(agent=agent).order_by("id"))
    assert all(t.status == TurnStatus.COMPLETED for t in turns)
    # Each started only after the one before it ended.
    for before, after in pairwise(turns):
        assert after.started_at >= before.ended_at


def test_a_turn_whose_process_died_is_ended_by_the_next_send(agent):
    dead = Turn.objects.create(
        agent=agent,
        status=TurnStatus.RUNNING,
        block_number=1,
        lease_until=timezone.now() - timedelta(seconds=1),
    )
    agent.last_block = 1
    agent.save()
    Block.objects.create(
        agent=agent, number=1, turn=dead, entries=[{"type": "message", "role": "user", "content": "lost?"}]
    )

    turn = turn_send(agent=agent, content="hello again")

    dead.refresh_from_db()
    assert dead.status == TurnStatus.FAILED
    assert "stopped" in dead.error
    assert Block.objects.get(number=1).status == TurnStatus.FAILED
    assert Block.objects.get(number=1).entries[0]["content"] == "lost?"
    assert (turn.status, turn.block_number) == (TurnStatus.COMPLETED, 2)


def test_cancelling_an_ended_turn_is_a_conflict(agent):
    from studio.errors import Conflict

    turn = turn_send(agent=agent, content="done")

    with pytest.raises(Conflict):
        turn_cancel(turn)


def test_a_game_with_no_credits_is_refused_before_any_model_call(agent, game):
    from billing.models import Account
    from studio.errors import PaymentRequired

    Account.objects.filter(game=game).update(balance=0)

    with pytest.raises(PaymentRequired):
        turn_send(agent=agent, content="hello")
    assert not Turn.objects.exists()


@pytest.mark.parametrize("transient", [False, True])
def test_a_send_to_an_agent_deleted_meanwhile_is_not_found_and_holds_nothing(game, define, transient):
    agent = define("dm")
    Agent.objects.filter(pk=agent.pk).delete()  # by another request, after this one looked it up

    with pytest.raises(NotFound) as refused:
        turn_send(agent=agent, content="Are you there?", transient=transient)

    assert refused.value.code == "agent_not_found"
    assert Account.objects.get(game=game).held == 0
    assert not Turn.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_agent_cannot_be_deleted_while_its_turn_runs(game, define, admin_api):
    agent = define("dm")
    thread, box = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    refused = admin_api.delete("/api/v1/agents/dm")
    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    thread.join(10)
    deleted = admin_api.delete("/api/v1/agents/dm")

    assert refused.status_code == 409
    assert error_of(refused)["code"] == "agent_busy"
    assert box["result"].status == TurnStatus.CANCELLED
    assert deleted.status_code == 204
