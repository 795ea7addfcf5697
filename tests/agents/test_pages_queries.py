"""The history fragment costs the same number of queries for 3 blocks as
for 15 (no query per block)."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.engine import turn_send

from ..conftest import call, script


def _queries(client) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/studio/ashmere/agents/dm/?fragment=history").status_code == 200
    return len(captured)


def test_the_history_fragment_does_not_query_per_block(designer, agent):
    for _ in range(3):
        turn_send(agent=agent, content=script(call("open_memory", name="x")))
    few = _queries(designer)
    for _ in range(12):
        turn_send(agent=agent, content=script(call("open_memory", name="x")))

    assert _queries(designer) == few
