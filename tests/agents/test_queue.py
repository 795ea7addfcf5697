"""Sends queued behind an agent's running turn: bounded in number, and
holding no database connection while they wait."""

import time

import pytest
from django.db import connection

from agents.models import Turn, TurnStatus
from agents.sending.turn_slot import turn_cancel
from tests.support.database import database_sessions
from tests.support.sending import turn_send

from ..conftest import UNTIL_CANCELLED, client_for, error_of, in_thread, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_past_max_queued_sends_a_send_is_429_agent_busy_with_retry_after(studio_conf, define, designer_key):
    studio_conf(MAX_QUEUED_SENDS=2)
    agent, other = define("dm"), define("npc")
    # The turn ahead runs until the test cancels it: the queue stays full.
    threads = [in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED, {"say": "first"}))]
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    threads += [in_thread(turn_send, agent=agent, content=f"queued {n}") for n in range(2)]
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.QUEUED).count() == 2)
    api = client_for(designer_key)

    refused = api.post("/api/v1/agents/dm/messages", {"content": "one too many"}, format="json")
    elsewhere = api.post("/api/v1/agents/npc/messages", {"content": "hello"}, format="json")
    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    for thread, _ in threads:
        thread.join(60)

    assert refused.status_code == 429
    assert error_of(refused)["code"] == "agent_busy"
    assert int(refused["Retry-After"]) >= 1
    assert elsewhere.status_code == 200
    statuses = [box["result"].status for _, box in threads]
    assert statuses == [TurnStatus.CANCELLED, TurnStatus.COMPLETED, TurnStatus.COMPLETED]
    assert Turn.objects.filter(agent=agent).count() == 3
    assert Turn.objects.filter(agent=other).count() == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="counts PostgreSQL's sessions")
def test_queued_sends_hold_no_database_connection_while_they_wait(define):
    agent = define("dm")
    before = database_sessions()
    # The turn ahead runs until the test cancels it: the six wait meanwhile.
    first = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED, {"say": "first"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    queued = [in_thread(turn_send, agent=agent, content=f"queued {n}") for n in range(6)]
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.QUEUED).count() == 6)
    # Over a second: a waiter holds a connection only for the moment it looks.
    during = min(database_sessions() for _ in range(20) if not time.sleep(0.05))
    assert Turn.objects.filter(agent=agent, status=TurnStatus.QUEUED).count() == 6  # they waited throughout
    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    for thread, _ in [first, *queued]:
        thread.join(60)

    assert during <= before + 1  # the running turn's, at most
    assert [box["result"].status for _, box in queued] == [TurnStatus.COMPLETED] * 6


def test_a_send_that_waits_too_long_is_503_with_retry_after_and_its_retry_runs(
    studio_conf, define, designer_key
):
    studio_conf(SEND_WAIT_SECONDS=1)
    agent = define("dm")
    # The turn ahead runs until the test cancels it: the send cannot but wait too long.
    running = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED, {"say": "slow"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    api = client_for(designer_key)
    headers = {"HTTP_IDEMPOTENCY_KEY": "msg-1"}

    waited = api.post("/api/v1/agents/dm/messages", {"content": "hello"}, format="json", **headers)
    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    running[0].join(60)
    retried = api.post("/api/v1/agents/dm/messages", {"content": "hello"}, format="json", **headers)

    assert waited.status_code == 503
    assert error_of(waited)["code"] == "agent_busy"
    assert int(waited["Retry-After"]) >= 1
    gave_up = Turn.objects.get(agent=agent, error_code="busy")
    assert gave_up.status == TurnStatus.FAILED
    assert retried.status_code == 200 and retried.json()["turn"]["status"] == "completed"
    assert retried.json()["turn"]["id"] != str(gave_up.uuid)
