"""The reads: agents' stats one at a time and many at once, and the answer
to a send built from what its run already holds."""

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agents.models import Block
from agents.selectors import agent_stats, agents_stats
from agents.sending import engine
from agents.wire import turn_cost, turn_tool_calls, turn_wire
from memories.models import Memory
from studio.models import Membership
from tests.conftest import call, quest_checkpoint, script
from tests.support.sending import turn_send

QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the silver key."}
WRITE_AND_OPEN_QUEST = script(call("close_memory", **QUEST), call("open_memory", name="quest"))


def _tokens(blocks) -> int:
    return sum(block.tokens for block in blocks)


def test_stats_for_several_agents_at_once_are_each_agents_own(define):
    dm, innkeeper, bard = define("dm"), define("innkeeper"), define("bard")
    turn_send(agent=dm, content=WRITE_AND_OPEN_QUEST)
    turn_send(agent=dm, content="The bells ring.")
    turn_send(agent=dm, content="The ferry comes.")
    quest_checkpoint(dm, through=2)
    turn_send(agent=innkeeper, content=script(call("close_memory", **QUEST)))
    turn_send(agent=innkeeper, content="A room for the night.")
    for agent in (dm, innkeeper):
        agent.refresh_from_db()

    stats = agents_stats([dm, innkeeper, bard])

    assert stats[dm.pk]["verbatimTokens"] == _tokens(Block.objects.filter(agent=dm, number=3)) > 0
    assert stats[dm.pk]["lastCheckpoint"]["throughBlock"] == 2
    assert stats[dm.pk]["openTokens"] == Memory.objects.get(agent=dm, name="quest").tokens > 0
    assert stats[innkeeper.pk]["verbatimTokens"] == _tokens(Block.objects.filter(agent=innkeeper))
    assert stats[innkeeper.pk]["lastCheckpoint"] is None
    assert stats[innkeeper.pk]["openTokens"] == 0
    assert stats[innkeeper.pk]["storeBytes"] == Memory.objects.get(agent=innkeeper).bytes > 0
    assert (stats[dm.pk]["blocks"], stats[innkeeper.pk]["blocks"]) == (3, 2)
    assert stats[bard.pk] == {
        "blocks": 0,
        "verbatimTokens": 0,
        "openTokens": 0,
        "storeBytes": 0,
        "lastCheckpoint": None,
    }
    assert agent_stats(innkeeper) == stats[innkeeper.pk]


def _list_page_queries(client) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/studio/ashmere/agents/").status_code == 200
    return len(captured)


def _busy_agent(define, name: str):
    agent = define(name)
    turn_send(agent=agent, content=WRITE_AND_OPEN_QUEST)
    turn_send(agent=agent, content="The bells ring.")
    quest_checkpoint(agent, through=1)


def test_the_agents_list_costs_the_same_queries_for_six_agents_as_for_two(define, game):
    user = get_user_model().objects.create_user("mara", password="pw-12345678")
    Membership.objects.create(user=user, game=game)
    client = Client()
    client.force_login(user)
    for name in ("a1", "a2"):
        _busy_agent(define, name)
    few = _list_page_queries(client)
    for name in ("a3", "a4", "a5", "a6"):
        _busy_agent(define, name)

    assert _list_page_queries(client) == few


def test_a_sends_answer_reads_nothing_back(agent):
    sent = engine.send(agent=agent, content=script(call("close_memory", **QUEST), "Noted."))

    with CaptureQueriesContext(connection) as captured:
        wire = turn_wire(sent.turn, cost=sent.cost, entries=sent.entries)

    assert len(captured) == 0
    assert wire["cost"] == turn_cost(sent.turn)
    assert wire["toolCalls"] == turn_tool_calls(sent.turn)
    assert [c["name"] for c in wire["toolCalls"]] == ["close_memory"]


def test_a_repeated_send_answers_with_the_first_sends_cost_and_tool_calls(agent):
    content = script(call("close_memory", **QUEST), "Noted.")
    first = engine.send(agent=agent, content=content, idempotency_key="k-1")
    repeat = engine.send(agent=agent, content=content, idempotency_key="k-1")

    assert repeat.turn.pk == first.turn.pk
    assert turn_wire(repeat.turn, cost=repeat.cost, entries=repeat.entries) == turn_wire(
        first.turn, cost=first.cost, entries=first.entries
    )
