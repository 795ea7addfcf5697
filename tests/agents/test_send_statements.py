"""What a send costs the database, in statements: a plain send at most 8,
a send with one memory tool call at most 12 — the same with a long
history as with a short one. Transaction control (BEGIN, COMMIT,
savepoints) is not counted: the test runs inside a transaction that turns
each of the send's into a savepoint."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import TurnStatus
from billing.models import CostLine
from tests.support.sending import turn_send

from ..conftest import call, script

OPEN_NOTES = script(call("open_memory", name="notes"), "The notes say: north.")


def _statements(agent, content) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        turn = turn_send(agent=agent, content=content)
    assert turn.status == TurnStatus.COMPLETED, turn.error
    sql = [query["sql"] for query in captured.captured_queries]
    return [s for s in sql if not s.startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO"))]


@pytest.fixture
def played(agent):
    """An agent with a memory `notes`, open, and a few blocks behind it."""
    turn_send(
        agent=agent, content=script(call("close_memory", name="notes", description="d", content="North."))
    )
    turn_send(agent=agent, content=OPEN_NOTES)
    for number in range(3):
        turn_send(agent=agent, content=f"Message {number}.")
    return agent


def test_a_plain_send_runs_at_most_eight_statements(played):
    statements = _statements(played, "Where does the road go?")

    assert len(statements) <= 8, "\n".join(statements)


def test_a_send_with_one_tool_call_runs_at_most_twelve_statements(played):
    statements = _statements(played, OPEN_NOTES)

    # SQLite has no DELETE inside WITH: the turn's recorded entries go in a
    # statement of their own as its block takes them.
    assert len(statements) <= (12 if connection.vendor == "postgresql" else 13), "\n".join(statements)


def test_the_count_does_not_grow_with_the_history(played):
    before = len(_statements(played, "Once more."))
    for number in range(10):
        turn_send(agent=played, content=OPEN_NOTES if number % 2 else f"Filler {number}.")

    assert len(_statements(played, "Once more.")) == before


def test_a_send_with_a_tool_call_is_still_charged_for_each_step_and_the_call(played):
    turn = turn_send(agent=played, content=OPEN_NOTES)

    lines = {line.kind: line for line in CostLine.objects.filter(turn_id=turn.uuid)}
    assert lines["model"].detail["calls"] == 2
    assert lines["memory_access"].quantity == 1


def test_a_new_agents_second_send_reads_no_block(agent):
    turn_send(agent=agent, content="The first words.")

    statements = _statements(agent, "The second words.")

    assert not [s for s in statements if 'FROM "agents_block"' in s], "\n".join(statements)
