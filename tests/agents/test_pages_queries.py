"""The history fragment costs the same number of queries for 3 blocks as
for 15, and the pages through time as many for 5 blocks as for 21 (no
query per block, memory change or checkpoint)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.compaction import compaction_request
from agents.models import Checkpoint, CompactionReason
from tests.support.sending import turn_send

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


def _play(agent, blocks: int) -> None:
    """`blocks` blocks that each write a memory, then a compaction, then one more block."""
    for _ in range(blocks):
        number = agent.last_block + 1
        turn_send(
            agent=agent,
            content=script(
                call("close_memory", name=f"m{number}", description="d", content=f"Block {number}."),
                call("open_memory", name=f"m{number}"),
                {"say": f"@memory m{number}: Rewritten at {number}."},
            ),
        )
        agent.refresh_from_db()
    compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    turn_send(agent=agent, content="And then?")
    agent.refresh_from_db()


def _time_pages(agent) -> dict[str, str]:
    page = "/studio/ashmere/agents/dm/"
    return {
        "as of the newest block": f"{page}blocks/{agent.last_block}/",
        "checkpoints": f"{page}checkpoints/",
        "timeline": f"{page}?fragment=timeline",
        "export": f"{page}export/",
    }


@pytest.mark.slow  # heavy by design: left out of `make test-fast` (#38)
@pytest.mark.django_db(transaction=True)
def test_the_pages_through_time_do_not_query_per_block(designer, agent, django_assert_max_num_queries):
    _play(agent, 4)
    few = {}
    for label, url in _time_pages(agent).items():
        with CaptureQueriesContext(connection) as captured:
            assert designer.get(url).status_code == 200
        few[label] = len(captured)
    _play(agent, 15)
    assert (agent.last_block, Checkpoint.objects.filter(agent=agent).count()) == (21, 2)

    for label, url in _time_pages(agent).items():
        with django_assert_max_num_queries(few[label]):
            assert designer.get(url).status_code == 200, label
