"""Nothing ever rewrites a memory it cannot see — under any interleaving.
The compactor is shown `quest`; while its model call is held open, the
agent deletes `quest`, makes a new `quest` and opens it. The rewrite planned
for the old memory must not land on the new one (same name, same version
number: it is another memory), whether the compaction runs in a thread of
the web process or on a Celery worker."""

import pytest

from agents.models import Compaction, CompactionStatus
from memories.models import Change, Memory, MemoryEvent
from tests.support.compactions import wait_for_compaction

from ..conftest import call, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the key."}


def play(send) -> None:
    send(script(call("close_memory", **QUEST), call("open_memory", name="quest")))
    send("@compactor-sleep 3\n@memory quest: the compactor's version")
    send("newest")


def remake_quest_while_it_compacts(api, send, agent) -> None:
    assert api.post("/api/v1/agents/dm/compact").status_code == 202
    # Running, and holding for its model call: its plan has read the store
    # (a busy worker may claim it well before it reads anything).
    wait_for(
        lambda: Compaction.objects.filter(agent=agent, status=CompactionStatus.RUNNING, held__gt=0).exists()
    )
    send(
        script(
            call("delete_memory", name="quest"),
            call("close_memory", **{**QUEST, "content": "the agent's version"}),
            call("open_memory", name="quest"),
        )
    )
    wait_for_compaction(agent, CompactionStatus.DONE)


def assert_the_new_quest_is_untouched() -> None:
    quest = Memory.objects.get(name="quest")
    assert (quest.content, quest.version, quest.is_open) == ("the agent's version", 1, True)
    dropped = MemoryEvent.objects.get(name="quest", change=Change.DROPPED)
    assert "deleted and made again after the compactor read it" in dropped.note


def test_in_a_thread_of_the_web_process(api, send, agent, studio_conf):
    studio_conf(COMPACTION_RUNNER="thread")
    play(send)

    remake_quest_while_it_compacts(api, send, agent)

    assert_the_new_quest_is_untouched()


def test_on_a_celery_worker(api, send, agent, start_worker):
    play(send)
    start_worker()

    remake_quest_while_it_compacts(api, send, agent)

    assert_the_new_quest_is_untouched()
