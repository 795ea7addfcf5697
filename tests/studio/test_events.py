"""Live events go to the agent's channel-layer group, only after the change
they report is committed; each agent keeps its last events, numbered."""

import asyncio
import json
from datetime import datetime, timedelta

import pytest
from channels.layers import get_channel_layer
from django.db import transaction

from studio.live import event_types
from studio.live.events import (
    BUFFER_SIZE,
    agent_events_buffer,
    agent_events_since,
    agent_group,
    publish_on_commit,
)
from tests.support.events import probe, probe_n
from tests.support.sending import turn_send

from ..conftest import call, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class Listener:
    """A channel in the agent's group, read on one event loop of its own
    (a channel layer's receive is bound to the loop that first used it)."""

    def __init__(self, agent_id):
        self.loop = asyncio.new_event_loop()
        self.layer = get_channel_layer()
        self.channel = self.loop.run_until_complete(self.layer.new_channel())
        self.loop.run_until_complete(self.layer.group_add(agent_group(agent_id), self.channel))

    def events(self, wait=0.3):
        async def drain():
            out = []
            while True:
                try:
                    message = await asyncio.wait_for(self.layer.receive(self.channel), wait)
                except TimeoutError:
                    return out
                out.append(message["event"])

        return self.loop.run_until_complete(drain())


def test_a_send_announces_its_turn_tool_calls_memory_changes_and_end(define):
    agent = define("dm")
    listener = Listener(agent.pk)

    turn = turn_send(
        agent=agent,
        content=script(call("close_memory", name="quest", description="Now", content="Key."), {"say": "ok"}),
    )

    events = listener.events()
    types = [e["type"] for e in events]
    assert types == ["turn.started", "memory.changed", "tool_call", "reply.delta", "turn.finished"]
    changed, tool_call, delta, finished = events[1:]
    assert (delta["text"], delta["turnId"]) == ("ok", str(turn.uuid))
    assert (changed["name"], changed["change"], changed["by"]) == ("quest", "created", "agent")
    assert (tool_call["name"], tool_call["isError"], tool_call["turnId"]) == (
        "close_memory",
        False,
        str(turn.uuid),
    )
    assert finished["status"] == "completed"
    assert finished["cost"]["lines"][0]["kind"] == "model"


def test_closing_an_open_memory_with_new_content_announces_the_update_and_then_the_close(define):
    agent = define("dm")
    quest = {"name": "quest", "description": "Now", "content": "Key."}
    turn_send(agent=agent, content=script(call("close_memory", **quest), call("open_memory", name="quest")))
    listener = Listener(agent.pk)

    turn = turn_send(agent=agent, content=script(call("close_memory", name="quest", content="The house.")))

    # The first turn's events may still be on their way: keep this turn's.
    changes = [
        (e["name"], e["change"], e["by"])
        for e in listener.events()
        if e["type"] == "memory.changed" and e["turnId"] == str(turn.uuid)
    ]
    assert changes == [("quest", "updated", "agent"), ("quest", "closed", "agent")]


def test_nothing_is_announced_before_commit_and_nothing_for_a_rollback(define):
    agent = define("dm")
    listener = Listener(agent.pk)

    with transaction.atomic():
        publish_on_commit(agent.pk, probe(1))
        assert listener.events(wait=0.2) == []
    try:
        with transaction.atomic():
            publish_on_commit(agent.pk, probe(2))
            raise RuntimeError("roll back")
    except RuntimeError:
        pass

    assert [probe_n(e) for e in listener.events()] == [1]


def test_a_compaction_announces_its_start_its_checkpoint_and_its_end(define):
    from agents.compaction import compaction_request
    from agents.models import CompactionReason

    agent = define("dm")
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    listener = Listener(agent.pk)

    compaction_request(agent=agent, reason=CompactionReason.MANUAL)

    events = [e for e in listener.events() if e["type"].startswith(("compaction", "checkpoint"))]
    assert [e["type"] for e in events] == [
        "compaction.queued",
        "compaction.started",
        "checkpoint.written",
        "compaction.finished",
    ]
    assert events[2]["throughBlock"] == 1 and events[2]["kind"] == "compaction"
    assert events[3]["status"] == "done"


@pytest.mark.usefixtures("event_buffers_cleared")
@pytest.mark.parametrize("layer", ["redis", "in-process"])
def test_each_agent_keeps_its_last_events_in_seq_order_and_says_when_it_cannot_reach_back(
    define, settings, layer
):
    if layer == "in-process":
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    agent, other = define("dm"), define("bard")

    for n in range(BUFFER_SIZE + 2):
        publish_on_commit(agent.pk, probe(n))
    publish_on_commit(other.pk, probe(-1))
    wait_for(lambda: probe_n((agent_events_buffer(agent.pk)[1] or [{}])[-1]) == BUFFER_SIZE + 1, timeout=60)

    head, kept = agent_events_buffer(agent.pk)
    assert [probe_n(e) for e in kept] == list(range(2, BUFFER_SIZE + 2))  # the oldest two are gone
    assert [e["seq"] for e in kept] == list(range(head - BUFFER_SIZE + 1, head + 1))
    assert all(datetime.fromisoformat(e["at"]).utcoffset() == timedelta(0) for e in kept)
    assert agent_events_since(agent.pk, head - 3) == kept[-3:]
    assert agent_events_since(agent.pk, head) == []
    assert agent_events_since(agent.pk, kept[0]["seq"] - 1) == kept
    assert agent_events_since(agent.pk, kept[0]["seq"] - 2) is None  # no longer kept
    assert agent_events_since(agent.pk, head + 1) is None  # not of this stream
    assert agent_events_since(define("new").pk, 0) is None  # no stream at all


@pytest.mark.usefixtures("event_buffers_cleared")
def test_a_read_after_a_seq_gets_only_the_newer_events(agent):
    for n in range(5):
        publish_on_commit(agent.pk, probe(n))
    wait_for(lambda: len(agent_events_buffer(agent.pk)[1]) == 5)
    head, everything = agent_events_buffer(agent.pk)

    assert agent_events_buffer(agent.pk, after=head - 2) == (head, everything[-2:])
    assert agent_events_buffer(agent.pk, after=head) == (head, [])


@pytest.mark.usefixtures("event_buffers_cleared")
@pytest.mark.parametrize("layer", ["redis", "in-process"])
def test_a_buffer_keeps_no_more_bytes_than_its_bound_the_newest_events_first(
    define, settings, studio_conf, layer
):
    if layer == "in-process":
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    studio_conf(EVENT_BUFFER_BYTES=65536)
    agent = define("dm")
    big = "x" * 10_000

    for n in range(20):
        publish_on_commit(agent.pk, event_types.reply_delta(agent="probe", turn_id="big", text=f"{n} {big}"))
    publish_on_commit(agent.pk, probe(20))
    wait_for(lambda: probe_n((agent_events_buffer(agent.pk)[1] or [{}])[-1]) == 20, timeout=60)

    head, kept = agent_events_buffer(agent.pk)
    assert sum(len(json.dumps(e)) for e in kept) <= 65536
    # The newest, in order, with no gap: a listener further back is told to re-read.
    assert [e["text"].split()[0] for e in kept[:-1]] == [str(n) for n in range(21 - len(kept), 20)]
    assert 5 <= len(kept) <= 7
    assert agent_events_since(agent.pk, kept[0]["seq"] - 2) is None


@pytest.mark.usefixtures("event_buffers_cleared")
def test_an_event_larger_than_the_whole_buffer_is_still_kept_as_the_newest(define, studio_conf):
    studio_conf(EVENT_BUFFER_BYTES=65536)
    agent = define("dm")

    publish_on_commit(agent.pk, probe(1))
    publish_on_commit(agent.pk, event_types.reply_delta(agent="probe", turn_id="big", text="y" * 100_000))
    wait_for(
        lambda: agent_events_buffer(agent.pk)[1] and agent_events_buffer(agent.pk)[1][-1]["text"][0] == "y"
    )

    head, kept = agent_events_buffer(agent.pk)
    assert len(kept) == 1 and kept[0]["seq"] == head
