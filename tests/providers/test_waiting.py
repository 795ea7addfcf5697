"""A turn waiting on its model sleeps: its thread wakes to give its
database connection back, at its deadline, for a cancel, and at the end
of its process's shutdown grace — not on a clock of its own — and its
lease is renewed with every other turn of its process, in one statement
(`agents.sending.leases`). With hundreds of players waiting on a
slow model, each turn's thread waking several times a second, and each
turn renewing its own lease, were most of the CPU a waiting send cost.
Through the official SDKs against their fakes on loopback."""

import threading

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from agents.models import Turn, TurnStatus
from agents.sending import engine, leases
from agents.sending.turn_slot import turn_cancel
from studio.runtime import wakeups
from studio.serving import lifecycle
from tests.support import fake_anthropic, fake_openai
from tests.support.sending import turn_send

from ..conftest import in_thread, wait_for
from .conftest import LATER_THAN_ANY_WAIT


def answer(provider, *, delay: float):
    if provider.model.startswith("openai:"):
        return fake_openai.completion("At last.", delay=delay)
    return fake_anthropic.message(fake_anthropic.text("At last."), delay=delay)


@pytest.fixture
def nothing_due(monkeypatch, studio_conf):
    """No renewal of the turn's lease falls within a test."""
    monkeypatch.setattr(leases, "RENEW_SECONDS", 3600)
    studio_conf(TURN_LEASE_SECONDS=3 * 3600)


def test_a_turn_waiting_on_its_model_wakes_only_to_give_its_connection_back(
    provider, define, nothing_due, monkeypatch
):
    agent = define("dm", model=provider.model)
    checks = []
    check = engine._Control.check
    monkeypatch.setattr(engine._Control, "check", lambda control: checks.append(1) or check(control))

    def checks_of_a_send(delay: float) -> int:
        checks.clear()
        provider.push(answer(provider, delay=delay))
        assert turn_send(agent=agent, content="Well?").status == TurnStatus.COMPLETED
        return len(checks)

    quick = checks_of_a_send(0)
    slow = checks_of_a_send(1.5)

    # a poll every 0.2 s would have checked ~7 more times
    assert slow - quick <= 1


@pytest.mark.django_db(transaction=True)
def test_the_end_of_the_shutdown_grace_stops_a_turn_blocked_on_its_model(
    provider, define, nothing_due, monkeypatch
):
    monkeypatch.setattr(lifecycle, "_past_grace", threading.Event())  # this process's, for the test
    agent = define("dm", model=provider.model)
    provider.push(answer(provider, delay=LATER_THAN_ANY_WAIT))
    thread, box = in_thread(turn_send, agent=agent, content="Tell me a long story.")
    wait_for(lambda: len(provider.fake.requests) == 1)

    lifecycle.grace_end()
    thread.join(60)

    assert not thread.is_alive()
    assert (box["result"].status, box["result"].error_code) == (TurnStatus.FAILED, "shutdown")


@pytest.mark.django_db(transaction=True)
def test_a_cancel_wakes_a_turn_blocked_on_its_model(provider, define, nothing_due):
    agent = define("dm", model=provider.model)
    provider.push(answer(provider, delay=LATER_THAN_ANY_WAIT))
    thread, box = in_thread(turn_send, agent=agent, content="Tell me a long story.")
    wait_for(lambda: len(provider.fake.requests) == 1)

    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    thread.join(60)

    assert not thread.is_alive()
    assert box["result"].status == TurnStatus.CANCELLED


def _running(agent) -> Turn:
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    return Turn.objects.get(agent=agent, status=TurnStatus.RUNNING)


@pytest.mark.django_db(transaction=True)
def test_the_leases_of_turns_waiting_on_their_models_are_renewed_in_one_statement(
    provider, define, nothing_due
):
    agents = [define(name, model=provider.model) for name in ("dm", "innkeeper", "smith")]
    provider.push(*[answer(provider, delay=LATER_THAN_ANY_WAIT) for _ in agents])
    sends = [in_thread(turn_send, agent=agent, content="Well?") for agent in agents]
    wait_for(lambda: len(provider.fake.requests) == len(agents))
    before = {turn.pk: turn.lease_until for turn in map(_running, agents)}

    with CaptureQueriesContext(connection) as captured:
        leases.renew_due(older_than=0)

    assert len(captured.captured_queries) == 1
    after = dict(Turn.objects.filter(pk__in=before).values_list("pk", "lease_until"))
    assert all(after[pk] > before[pk] for pk in before)
    assert set(Turn.objects.filter(pk__in=before).values_list("status", flat=True)) == {TurnStatus.RUNNING}
    provider.fake.release()
    for thread, _ in sends:
        thread.join(60)


@pytest.mark.django_db(transaction=True)
def test_a_cancel_whose_wake_up_was_lost_is_found_by_the_lease_renewal(
    provider, define, nothing_due, monkeypatch
):
    agent = define("dm", model=provider.model)
    provider.push(answer(provider, delay=LATER_THAN_ANY_WAIT))
    thread, box = in_thread(turn_send, agent=agent, content="Tell me a long story.")
    wait_for(lambda: len(provider.fake.requests) == 1)
    running = _running(agent)
    monkeypatch.setattr(wakeups._waiters, "wake", lambda key=None: None)  # every wake-up lost
    turn_cancel(running)

    leases.renew_due(older_than=0)
    thread.join(60)

    assert not thread.is_alive()
    assert box["result"].status == TurnStatus.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_a_renewal_the_database_refused_leaves_the_turns_running_and_is_made_again(
    provider, define, nothing_due, monkeypatch, caplog
):
    agent = define("dm", model=provider.model)
    provider.push(answer(provider, delay=LATER_THAN_ANY_WAIT))
    thread, box = in_thread(turn_send, agent=agent, content="Well?")
    wait_for(lambda: len(provider.fake.requests) == 1)
    running = _running(agent)

    def refused(*args, **kwargs):
        raise OperationalError("the database is away")

    with monkeypatch.context() as away:
        away.setattr(leases, "leases_renew", refused)
        leases.renew_due(older_than=0)
    assert "leases could not be renewed" in caplog.text
    leases.renew_due(older_than=0)

    running_now = Turn.objects.get(pk=running.pk)
    assert running_now.status == TurnStatus.RUNNING
    assert running_now.lease_until > running.lease_until
    provider.fake.release()
    thread.join(60)
    assert box["result"].status == TurnStatus.COMPLETED
