"""Races on the turn slot and its holds, each made to happen on purpose: a
step of one request is held open while another request runs through it.

The holds must come out exact whatever interleaves: every live turn's hold
is on the account once, and given back once."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from agents import compaction
from agents.compaction import compaction_request, compaction_run
from agents.models import Agent, Block, Compaction, CompactionReason, CompactionStatus, Turn, TurnStatus
from agents.sending import turn_slot
from agents.sending.turn_slot import turn_cancel
from agents.tasks import compaction_task
from billing import ledger
from billing.models import Account, Adjustment
from studio.errors import NotFound, PaymentRequired
from studio.runtime import wakeups
from tests.support.sending import turn_send
from tests.support.turns import dead_turn

from ..conftest import in_thread, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def sessions_waiting_for_a_lock() -> int:
    """Sessions of the test database waiting for a lock another holds (on
    SQLite, whose writers wait on the file, none are seen: 1)."""
    if connection.vendor != "postgresql":
        return 1
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def held(game) -> Decimal:
    return Account.objects.get(game=game).held


def assert_ledger_exact(game):
    assert held(game) == 0
    assert all(check.is_consistent for check in ledger.ledger_check())


def paused_on(monkeypatch, name: str, when):
    """Wrap turn_slot.<name> so that a call for which `when(*args)` is true
    pauses (after running, or before with `when` returning "before") until
    released; returns (reached, release) events."""
    real = getattr(turn_slot, name)
    reached, release = threading.Event(), threading.Event()

    def wrapper(*args, **kwargs):
        moment = when(*args, **kwargs) if not reached.is_set() else None
        if moment == "before":
            reached.set()
            release.wait(60)  # the test releases it; a minute only if it never does
        result = real(*args, **kwargs)
        if moment == "after":
            reached.set()
            release.wait(60)
        return result

    monkeypatch.setattr(turn_slot, name, wrapper)
    return reached, release


def test_a_queued_turn_cancelled_as_it_starts_never_runs_and_gives_its_hold_back_once(
    define, game, monkeypatch
):
    agent = define("dm")
    first, _ = in_thread(turn_send, agent=agent, content=script({"sleep": 0.3}, {"say": "first"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    # The queued send stops right after it finds itself at the head of the
    # queue — read, not yet written — while a cancel comes in.
    reached, release = paused_on(
        monkeypatch, "live_head", lambda agent, turn=None: "after" if turn is not None else None
    )
    second, second_box = in_thread(turn_send, agent=agent, content=script({"sleep": 1}, {"say": "second"}))
    assert reached.wait(10)
    queued = Turn.objects.get(agent=agent, status=TurnStatus.QUEUED)
    cancel, cancel_box = in_thread(turn_cancel, queued)
    cancel.join(0.5)  # a window: it waits for the start to commit, or it ends the turn first
    release.set()
    for thread in (first, second, cancel):
        thread.join(60)

    assert "error" not in cancel_box and "error" not in second_box
    queued.refresh_from_db()
    assert queued.status == TurnStatus.CANCELLED
    assert second_box["result"].reply != "second"
    assert_ledger_exact(game)


def test_a_cancel_and_a_send_ending_the_same_dead_turn_do_not_deadlock(define, game, monkeypatch):
    agent = define("dm")
    dead = dead_turn(agent, status=TurnStatus.QUEUED)
    # The cancel stops after locking the dead turn, before it gives the hold back.
    reached, release = paused_on(
        monkeypatch,
        "turn_finish",
        lambda turn, status, **kw: "before" if status == TurnStatus.CANCELLED else None,
    )
    cancel, cancel_box = in_thread(turn_cancel, dead)
    assert reached.wait(10)
    send, send_box = in_thread(turn_send, agent=agent, content="hello")
    # The send reaches the locks the cancel holds, and waits for them.
    wait_for(lambda: sessions_waiting_for_a_lock() > 0, timeout=60)
    release.set()
    cancel.join(60)
    send.join(60)

    assert "error" not in cancel_box, cancel_box.get("error")
    assert "error" not in send_box, send_box.get("error")
    assert send_box["result"].status == TurnStatus.COMPLETED
    dead.refresh_from_db()
    assert dead.status == TurnStatus.CANCELLED
    assert_ledger_exact(game)


@pytest.mark.slow  # heavy by design: it waits out a compaction's 6 s; left out of `make test-fast` (#38)
def test_a_turn_waiting_on_a_compaction_keeps_its_lease_and_its_place(define, game, studio_conf, monkeypatch):
    monkeypatch.setattr(wakeups, "POLL_SECONDS", 0.2)  # it looks (and renews) five times a second
    # A lease of 3 s renewed five times a second: a loaded machine's late
    # renewal does not let it lapse.
    studio_conf(
        TURN_LEASE_SECONDS=3, COMPACTION_WAIT_SECONDS=6, COMPACTION_RUNNER="none", COMPACTION_SOFT_RATIO=10.0
    )
    agent = define("dm", memory_enabled=False, max_tokens=256)
    for number in (1, 2, 3):  # 300 tokens of history: the next send waits for room
        Block.objects.create(
            agent=agent,
            number=number,
            status=TurnStatus.COMPLETED,
            tokens=100,
            entries=[{"type": "message", "role": "user", "content": "x"}],
        )
    Agent.objects.filter(pk=agent.pk).update(last_block=3)
    agent.refresh_from_db()

    waiting, waiting_box = in_thread(turn_send, agent=agent, content="first")
    wait_for(lambda: Compaction.objects.filter(agent=agent).exists())
    started_with = Turn.objects.get(agent=agent).lease_until
    wait_for(lambda: timezone.now() > started_with, timeout=60)  # past the lease it was started with
    later, later_box = in_thread(turn_send, agent=agent, content="second")
    waiting.join(60)
    later.join(60)

    first, second = waiting_box["result"], later_box["result"]
    assert (first.status, first.error_code) == (TurnStatus.FAILED, "context_too_large")
    assert first.compaction_wait_ms >= 5900
    assert second.started_at >= first.ended_at
    assert_ledger_exact(game)


def test_deleting_an_agent_with_a_dead_turn_gives_its_hold_back(define, game, admin_api):
    agent = define("dm")
    dead_turn(agent)
    assert held(game) > 0

    response = admin_api.delete("/api/v1/agents/dm")

    assert response.status_code == 204
    assert not Agent.objects.filter(pk=agent.pk).exists()
    assert_ledger_exact(game)


def test_a_dead_turn_on_an_idle_agent_does_not_make_its_game_refuse_sends(define, game):
    idle, busy = define("idle"), define("dm")
    hold = ledger.hold_estimate(max_tokens=busy.max_tokens, price=ledger.model_price("scripted"))
    Account.objects.filter(game=game).update(balance=hold * Decimal("1.5"))
    Adjustment.objects.filter(game=game).update(amount=hold * Decimal("1.5"))
    dead = dead_turn(idle)  # holds what the game has: nothing left for another send

    turn = turn_send(agent=busy, content="hello")

    assert turn.status == TurnStatus.COMPLETED
    dead.refresh_from_db()
    assert (dead.status, dead.error_code) == (TurnStatus.FAILED, "process_stopped")
    assert_ledger_exact(game)


def test_a_game_that_cannot_pay_is_still_refused_after_looking_for_dead_turns(define, game):
    agent = define("dm")
    Account.objects.filter(game=game).update(balance=0)
    Adjustment.objects.filter(game=game).update(amount=0)
    live = Turn.objects.create(
        agent=agent, status=TurnStatus.QUEUED, lease_until=timezone.now() + timedelta(seconds=60)
    )

    with pytest.raises(PaymentRequired):
        turn_send(agent=agent, content="hello")
    live.refresh_from_db()
    assert live.status == TurnStatus.QUEUED  # alive: left alone


def test_a_turn_past_its_deadline_is_ended_failed(define, game, studio_conf):
    studio_conf(TURN_DEADLINE_SECONDS=1)
    agent = define("dm")

    turn = turn_send(agent=agent, content=script({"sleep": 5}, {"say": "too late"}))

    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "deadline")
    assert "STUDIO_TURN_DEADLINE_SECONDS" in turn.error
    assert_ledger_exact(game)


def test_a_live_turn_past_its_deadline_is_ended_by_the_next_send(define, game, studio_conf):
    studio_conf(TURN_DEADLINE_SECONDS=60)
    agent = define("dm")
    stuck = dead_turn(agent)
    # Its process renews the lease, but the turn is older than the deadline.
    Turn.objects.filter(pk=stuck.pk).update(
        lease_until=timezone.now() + timedelta(seconds=30), created_at=timezone.now() - timedelta(seconds=61)
    )

    turn = turn_send(agent=agent, content="hello")

    stuck.refresh_from_db()
    assert (stuck.status, stuck.error_code) == (TurnStatus.FAILED, "deadline")
    assert turn.status == TurnStatus.COMPLETED
    assert_ledger_exact(game)


# --- compactions ---------------------------------------------------------------------------


def test_asking_a_deleted_agent_for_a_compaction_is_not_found(define):
    agent = define("dm")
    Agent.objects.filter(pk=agent.pk).delete()

    with pytest.raises(NotFound):
        compaction_request(agent=agent, reason=CompactionReason.MANUAL)


def test_a_compaction_whose_lease_is_live_is_never_claimed_twice(define, studio_conf):
    studio_conf(COMPACTION_RUNNER="none")
    agent = define("dm")
    queued = Compaction.objects.create(agent=agent, reason=CompactionReason.MANUAL)
    assert compaction._claim(str(queued.uuid)) is not None  # a worker has it

    again = compaction_run(str(queued.uuid))  # a redelivered task, the first still running

    assert again is None
    queued.refresh_from_db()
    assert (queued.status, queued.attempts) == (CompactionStatus.RUNNING, 1)


def test_a_compaction_whose_lease_lapsed_is_claimed_again(define, studio_conf):
    studio_conf(COMPACTION_RUNNER="none")
    agent = define("dm")
    queued = Compaction.objects.create(agent=agent, reason=CompactionReason.MANUAL)
    compaction._claim(str(queued.uuid))
    Compaction.objects.filter(pk=queued.pk).update(lease_until=timezone.now() - timedelta(seconds=1))

    again = compaction_run(str(queued.uuid))

    assert again is not None and again.status == CompactionStatus.DONE
    assert again.attempts == 2


def test_the_compaction_task_is_stopped_past_the_compaction_lease(settings):
    lease = settings.STUDIO["COMPACTION_LEASE_SECONDS"]

    assert lease < compaction_task.soft_time_limit < compaction_task.time_limit
