"""The event catalogue (studio/live/event_types.py) is the one list of events:
nothing else is published, what is published fits its shape, the pages
listen only for events that exist, and the README's table is the
catalogue's."""

import ast
import re
from pathlib import Path

import pytest

from agents.compaction import compaction_request
from agents.models import CompactionReason, Turn, TurnEntry
from agents.replays import replay_start
from agents.sending.engine import tool_result_post
from billing.ledger import this_month
from billing.models import Account
from studio.live import event_types
from studio.live.event_types import CATALOGUE, PUBLISHED, NotInCatalogue, problems
from studio.live.events import agent_events_buffer, publish, publish_game_event_on_commit, publish_on_commit
from tests.support.sending import turn_send

from ..conftest import call, script, wait_for

ROOT = Path(__file__).resolve().parents[2]
APPS = ("agents", "billing", "memories", "studio")


def a_turn_started(**changes) -> dict:
    return {**event_types.turn_started(agent="dm", turn_id="t1", block=1, transient=False), **changes}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "event",
    [
        a_turn_started(type="turn.stared"),  # misspelt
        a_turn_started(type="hello"),  # to one listener, never into a stream
        {k: v for k, v in a_turn_started().items() if k != "block"},  # a field short
        a_turn_started(player="Ana"),  # a field the shape does not have
    ],
)
def test_an_event_that_is_not_the_catalogues_is_refused_at_publish_time(agent, game, event):
    with pytest.raises(NotInCatalogue):
        publish_on_commit(agent.pk, event)
    with pytest.raises(NotInCatalogue):
        publish(agent.pk, event)
    with pytest.raises(NotInCatalogue):
        publish_game_event_on_commit(game.pk, event)


def test_every_name_the_pages_listen_for_is_an_event_type():
    templates = list((ROOT / "templates").rglob("*.html"))
    listened = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in templates
        for names in re.findall(r'data-live-on="([^"]*)"', path.read_text())
        for name in names.split()
    }
    script = (ROOT / "static" / "studio.js").read_text()
    listened |= {("static/studio.js", name) for name in re.findall(r'\.type === "([^"]+)"', script)}
    assert {name for _, name in listened} >= {"turn.finished", "memory.changed", "reply.delta"}

    assert sorted((path, name) for path, name in listened if name != "*" and name not in CATALOGUE) == []


def _event_literals(path: Path) -> list[tuple[int, str]]:
    """The dict literals in `path` whose "type" is an event type's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                is_type = isinstance(key, ast.Constant) and key.value == "type"
                if is_type and isinstance(value, ast.Constant) and value.value in CATALOGUE:
                    found.append((node.lineno, value.value))
    return found


# A block's tool-call entry shares its name with the event.
NOT_EVENTS = {("agents/sending/context.py", "tool_call")}


def test_no_event_is_built_outside_the_catalogue():
    sources = [p for app in APPS for p in (ROOT / app).rglob("*.py") if "migrations" not in p.parts]
    literals = [
        (path.relative_to(ROOT).as_posix(), line, name)
        for path in sources
        if path.name != "event_types.py"
        for line, name in _event_literals(path)
    ]
    assert literals, "the scan finds the entries the engine keeps"

    assert [(path, line, name) for path, line, name in literals if (path, name) not in NOT_EVENTS] == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("event_buffers_cleared")
def test_every_event_a_game_publishes_fits_its_shape(define, game):
    give = {"name": "give_item", "description": "Hand over an item.", "parameters": {"type": "object"}}
    agent = define("dm", system_prompt="You are the dungeon master.", tools=(give,))
    # The next charge passes 80% of the month's cap and takes the balance below the alert.
    Account.objects.filter(game=game).update(
        month=this_month(), month_spent=90, monthly_cap=100, low_balance_alert=1000
    )
    quest = {"name": "quest", "description": "What the player wants", "content": "Find the key."}

    turn_send(agent=agent, content=script(call("close_memory", **quest), call("open_memory", name="quest")))
    turn_send(agent=agent, content=script(call("open_memory", name="nowhere"), {"say": "No such memory."}))
    turn_send(agent=agent, content="@memory quest: Open the house in Ashmere.")
    turn_send(agent=agent, content="Who is there?", transient=True)
    waiting = turn_send(agent=agent, content=script(call("give_item", item="key"), {"say": "Here."}))
    call_id = TurnEntry.objects.get(turn=waiting, waiting=True).call_id
    tool_result_post(agent=agent, turn_id=waiting.uuid, call_id=call_id, result="given")
    wait_for(lambda: Turn.objects.get(pk=waiting.pk).has_ended)
    turn_send(agent=agent, content=script({"fail": "the model is away"}))
    compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    wait_for(lambda: agent_events_buffer(agent.pk)[1][-1]["type"] == "compaction.finished")
    replay_start(agent=agent, from_block=1, through=2, changes={"memory": None})
    wait_for(lambda: agent_events_buffer(agent.pk)[1][-1]["type"] == "replay.finished")

    _, events = agent_events_buffer(agent.pk)
    assert {event["type"] for event in events} == {event_types.type_name(shape) for shape in PUBLISHED}
    assert {(e["trigger"]) for e in events if e["type"] == "budget.low"} == {"monthlyCap", "lowBalanceAlert"}
    assert {e["by"] for e in events if e["type"] == "memory.changed"} == {"agent", "compactor"}
    assert {e["status"] for e in events if e["type"] == "turn.finished"} == {"completed", "failed"}
    assert {e["transient"] for e in events if e["type"] == "turn.finished"} == {True, False}

    assert [(event["type"], problems(event)) for event in events if problems(event)] == []


def test_what_goes_to_one_listener_fits_its_shape_too():
    messages = [
        event_types.hello(agent="dm", game="ashmere", seq=None),
        event_types.resync(seq=12, message="Read again."),
        event_types.error(code="listen_only", message="Listen only."),
    ]

    assert [problems(message, stamped=False) for message in messages] == [[], [], []]
    assert problems({**messages[2], "seq": 1}, stamped=False) == ["unknown field seq"]


def test_problems_names_what_drifted():
    event = {**a_turn_started(block="one", extra=1), "seq": 5}

    assert problems(event) == ["missing at", "unknown field extra", "block='one' is not integer/null"]
    assert problems({"type": "turn.stared"}) == ["unknown type 'turn.stared'"]


def test_the_readme_event_table_is_the_catalogues():
    readme = (ROOT / "README.md").read_text()

    assert event_types.readme_block(readme) == event_types.markdown_table(), (
        "README.md's event table differs from studio/live/event_types.py: "
        "run `.venv/bin/python -m studio.live.event_types README.md` to write it again"
    )
    assert all(f"| `{name}` |" in readme for name in CATALOGUE)


@pytest.mark.django_db
def test_the_schema_describes_a_turns_server_sent_events_from_the_catalogue(client):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    turn_events = schema["paths"]["/api/v1/agents/{name}/turns/{turn_id}/events"]["get"]

    assert (
        event_types.markdown_table(event_types.TURN_STREAM) in turn_events["responses"]["200"]["description"]
    )
