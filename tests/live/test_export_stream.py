"""An agent file exported by a real Daphne server: streamed as it is read,
a batch of blocks at a time, in the request's own thread and database
connection — and the same document as read in one piece."""

import json

import pytest
from django.db import connection

from agents.history.export import FILE_BATCH, agent_document
from agents.models import Agent, Block, TurnStatus
from agents.sending.context import user_entry

pytestmark = pytest.mark.django_db(transaction=True)


def idle_in_transaction() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="counts PostgreSQL's sessions")
def test_a_long_history_is_exported_whole_through_a_real_server(agent, http):
    blocks = FILE_BATCH * 3 + 7
    Block.objects.bulk_create(
        Block(agent=agent, number=n, status=TurnStatus.COMPLETED, entries=[user_entry(f"{n} é\u2028")])
        for n in range(1, blocks + 1)
    )
    Agent.objects.filter(pk=agent.pk).update(last_block=blocks)

    with http.stream("GET", "/api/v1/agents/dm/export") as response:
        chunks = list(response.iter_bytes())
        pending = idle_in_transaction()

    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    document = json.loads(b"".join(chunks))
    assert [b["block"] for b in document["blocks"]] == list(range(1, blocks + 1))
    assert document == {**agent_document(agent), "exportedAt": document["exportedAt"]}
    assert pending == 0
