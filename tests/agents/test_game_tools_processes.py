"""A game tool call across real processes, as in production: two Daphne
processes on PostgreSQL and Redis and a Celery worker. The turn waits on one
web process, that process is killed (SIGKILL), the game's answer is posted to
the other, and the turn goes on and ends there — and the compaction due after
it runs on the worker."""

import signal

import pytest
from django.conf import settings

from agents.models import Block, Checkpoint, Compaction, CompactionStatus, Turn, TurnStatus
from tests.support.api import call_api
from tests.support.web import start_web, stop_web

from ..conftest import call, script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) between the processes"),
]

GIVE = {
    "name": "give_item",
    "description": "Hand the player an item from the innkeeper's stock.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    "timeoutSeconds": 600,
}


def test_a_wait_outlives_the_process_it_began_on_and_the_answer_goes_on_elsewhere(
    api, designer_key, start_worker, tmp_path
):
    worker = start_worker()
    servers, (first, second) = start_web(
        tmp_path,
        2,
        STUDIO_COMPACTION_RUNNER="celery",
        STUDIO_CELERY_QUEUE=settings.CELERY_TASK_DEFAULT_QUEUE,
        # A forced checkpoint after block 2: a compaction for the worker once the turn ends.
        STUDIO_FORCED_CHECKPOINT_BLOCKS="1",
    )
    try:
        defined = api.put(
            "/api/v1/agents/dm",
            {"systemPrompt": "You keep the inn.", "memory": {}, "tools": [GIVE]},
            format="json",
        )
        assert defined.status_code == 201, defined.content
        status, _ = call_api(first, designer_key, "POST", "/agents/dm/messages", {"content": "Evening."})
        assert status == 200

        status, sent = call_api(
            first,
            designer_key,
            "POST",
            "/agents/dm/messages",
            {"content": script(call("give_item", item="the silver key"), {"say": "Here is your key."})},
        )
        assert status == 202 and sent["turn"]["status"] == "waiting", sent
        turn_id = sent["turn"]["id"]
        servers[0].process.send_signal(signal.SIGKILL)  # the process the turn waited on is gone
        servers[0].process.wait(10)

        call_id = sent["turn"]["pendingToolCalls"][0]["callId"]
        status, answered = call_api(
            second,
            designer_key,
            "POST",
            f"/agents/dm/turns/{turn_id}/tool-results",
            {"callId": call_id, "result": "given"},
        )

        assert status == 200, answered
        wait_for(lambda: Turn.objects.get(uuid=turn_id).has_ended, timeout=60)
        status, ended = call_api(second, designer_key, "GET", f"/agents/dm/turns/{turn_id}")
        turn = ended["turn"]
        assert (turn["status"], turn["reply"]) == ("completed", "Here is your key."), turn
        assert turn["toolCalls"][0]["result"] == "given"
        assert Block.objects.get(turn__uuid=turn_id).status == TurnStatus.COMPLETED
        wait_for(
            lambda: Compaction.objects.filter(agent__name="dm", status=CompactionStatus.DONE).exists(),
            timeout=60,
        )
        assert Checkpoint.objects.get(agent__name="dm").through_block >= 1
        assert "agents.tasks" in worker.log_path.read_text()  # it ran there
    finally:
        stop_web(servers)
