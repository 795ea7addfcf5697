"""Game code with the Python client fails early and reconciles (#36),
against a real studio (Daphne on this run's PostgreSQL and Redis, the
`scripted` model as its default): an agent's options are checked when it
is constructed, against the studio's own definition schema the client
ships, with a did-you-mean; a definition that fails while nothing waits on
it is logged, and raised by the agent's next call; `out_of_credits` holds
for each way a game cannot pay; every error of a send carries its
Idempotency-Key, and `turn_by_idempotency_key` finds the turn a send made
when the client saw only a network error (a TCP proxy that cuts the
studio's answer once the studio has played the send)."""

import logging
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from studio_client import OUT_OF_CREDITS, StudioError, connect, connect_async

from billing.funding import REFUSAL_SHORT_OF
from tests.support.out_of_credits import broke_game_key, capped_game_key
from tests.support.web import stop_web

from ..conftest import wait_for
from .test_python_client import Proxy, Studio, bearer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the servers it starts take this run's Redis"),
    pytest.mark.usefixtures("event_buffers_cleared", "stream_slots_cleared"),
]

ROOT = Path(__file__).resolve().parents[2]
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    studio = Studio(tmp_path_factory.mktemp("web"))
    yield studio
    stop_web(studio.processes)


@pytest.fixture
def io(web, designer_key):
    with connect(web.url, designer_key) as io:
        yield io


# --- options checked at construction ---------------------------------------------------------


def refused(io, web, options: dict) -> StudioError:
    before = len(web.requests())
    with pytest.raises(StudioError) as thrown:
        io.Agent("inn3", options)
    assert len(web.requests()) == before, "nothing was sent"
    return thrown.value


def test_a_misspelt_option_is_refused_at_construction_with_the_option_it_likely_meant(io, web):
    error = refused(io, web, {"systemPromt": "You keep the inn."})

    assert (error.status, error.code) == (400, "invalid_definition")
    assert (
        error.message == "io.Agent('inn3', ...): systemPromt: is not an option; did you mean 'systemPrompt'?"
    )
    assert error.details == [
        {"field": "systemPromt", "message": "is not an option; did you mean 'systemPrompt'?"}
    ]


def test_a_value_of_the_wrong_json_type_is_refused_at_construction_naming_the_field(io, web):
    error = refused(io, web, {"compaction": {"maxTokens": "8000"}})

    assert error.details == [
        {"field": "compaction.maxTokens", "message": "must be a whole number, not the string '8000'"}
    ]


def test_keywords_misplaced_and_nested_names_get_the_name_they_likely_meant(io, web):
    with pytest.raises(StudioError) as keywords:
        io.Agent("inn3", system_prompt="You keep the inn.", maxTokens=8000)
    nested = refused(io, web, {"memory": {"maxOpenToken": 10}, "compaction": {"type": "sliding_window"}})
    tools = refused(io, web, {"tools": [{"name": "give_item", "descripton": "Hand over an item."}]})

    assert [f"{d['field']}: {d['message']}" for d in keywords.value.details] == [
        "system_prompt: is not an option; did you mean 'systemPrompt'?",
        "maxTokens: is not an option; did you mean 'compaction.maxTokens'?",
    ]
    assert [d["message"] for d in nested.details] == [
        "is not an option; did you mean 'maxOpenTokens'?",
        '"sliding_window" is not a valid choice; the choices are "summarize", "sliding-window"; '
        'did you mean "sliding-window"?',
    ]
    assert [d["field"] for d in tools.details] == ["tools[0].descripton", "tools[0].description"]


def test_what_the_client_refuses_the_studio_refuses_too_field_for_field(io, web, designer_key):
    for options in (
        {"systemPromt": "x"},
        {"compaction": {"maxTokens": "8000"}},
        {"memory": {"maxOpenToken": 5}},
    ):
        mine = refused(io, web, options)
        theirs = httpx.put(f"{web.url}/api/v1/agents/inn3", json=options, headers=bearer(designer_key))

        assert theirs.status_code == mine.status
        assert theirs.json()["error"]["code"] == mine.code
        assert [d["field"] for d in theirs.json()["error"]["details"]] == [d["field"] for d in mine.details]


def test_every_option_the_studio_takes_with_its_type_constructs_and_is_defined(io):
    give = {
        "name": "give_item",
        "description": "Hand over an item.",
        "parameters": {"type": "object"},
        "timeoutSeconds": 30,
    }
    inn = io.Agent(
        "inn",
        {
            "systemPrompt": "You keep the inn.",
            "model": "scripted",
            "memory": {"maxOpenTokens": 1000},
            "compaction": {"type": "sliding-window", "maxTokens": 8000.0},
            "tools": [{**give, "run": lambda args, ctx: "ok"}],
        },
    )
    plain = io.Agent("plain", memory=None, tools=None)

    assert inn.ready["compaction"] == {"type": "sliding-window", "maxTokens": 8000}
    assert plain.ready["memory"] is None


# --- a definition that fails in the background -----------------------------------------------

UNHEEDED = """
import os
from studio_client import connect

io = connect(os.environ["STUDIO_URL"], os.environ["STUDIO_KEY"])
io.Agent("inn", {"systemPrompt": "You keep the inn.", "model": "nobody:no-model"})
"""


def test_a_definition_refused_while_nothing_waits_is_logged_where_logging_is_not_set_up(web, designer_key):
    env = {"STUDIO_URL": web.url, "STUDIO_KEY": designer_key, "PYTHONPATH": str(ROOT / "clients" / "python")}

    ran = subprocess.run(
        [sys.executable, "-c", UNHEEDED], env=env, capture_output=True, text=True, timeout=120, check=False
    )

    assert ran.returncode == 0, ran.stderr
    assert re.search(
        r"the definition of agent 'inn' failed \(invalid_definition\): .*nobody:no-model", ran.stderr
    )
    assert "its next call raises this error" in ran.stderr


def test_the_next_send_after_an_unheeded_failure_raises_it_with_the_sends_key(io, caplog):
    inn = io.Agent("inn", {"model": "nobody:no-model"})
    wait_for(lambda: "the definition of agent 'inn' failed" in caplog.text, timeout=30)

    with pytest.raises(StudioError) as first:
        inn.send("Hello?", idempotency_key="hello-1")
    with pytest.raises(StudioError) as second:
        inn.send("Hello?")

    assert (first.value.code, first.value.idempotency_key) == ("invalid_definition", "hello-1")
    assert "nobody:no-model" in first.value.message
    assert UUID.match(second.value.idempotency_key)
    assert [r.levelno for r in caplog.records if "failed" in r.getMessage()] == [logging.ERROR]


async def test_an_awaited_refusal_is_the_games_own_to_report_and_is_not_logged(web, designer_key, caplog):
    async with connect_async(web.url, designer_key) as io:
        inn = io.Agent("inn", {"model": "nobody:no-model"})
        with pytest.raises(StudioError) as awaited:
            await inn.ready
        io.Agent("inn2", {"model": "nobody:no-model"})  # never awaited: closing waits for its answer

    assert awaited.value.code == "invalid_definition"
    logged = [r.getMessage() for r in caplog.records if r.name == "studio_client"]
    assert len(logged) == 1 and "agent 'inn2' failed (invalid_definition)" in logged[0]


# --- out of credits --------------------------------------------------------------------------


def test_out_of_credits_is_one_check_whichever_way_the_game_cannot_pay(web):
    refusals = []
    for key in (broke_game_key(), capped_game_key()):
        with connect(web.url, key) as game:
            with pytest.raises(StudioError) as refusal:
                game.Agent("dm", {}).send("Hello?")
            refusals.append(refusal.value)

    assert [(e.status, e.code, e.out_of_credits) for e in refusals] == [
        (402, "budget_exhausted", True),
        (402, "spend_cap_reached", True),
    ]
    assert all(UUID.match(e.idempotency_key) for e in refusals)
    # Every refusal for want of credits the studio has (the pages' list of them), and no other.
    assert set(OUT_OF_CREDITS) == set(REFUSAL_SHORT_OF)
    assert not StudioError(429, "game_busy", "Busy.").out_of_credits


def test_the_javascript_clients_list_of_out_of_credits_codes_is_the_studios_too():
    listed = subprocess.run(
        [
            "node",
            "--input-type=module",
            "-e",
            "import { OUT_OF_CREDITS } from './index.js'; console.log(OUT_OF_CREDITS.join(' '))",
        ],
        cwd=ROOT / "clients" / "js",
        capture_output=True,
        text=True,
        check=True,
    )

    assert set(listed.stdout.split()) == set(REFUSAL_SHORT_OF)


# --- reconciling a send whose answer was lost ------------------------------------------------


def test_a_send_the_studio_played_whose_answer_was_lost_is_found_by_its_key(web, designer_key):
    with connect(web.url, designer_key) as io:
        dm = io.Agent("dm", {"memory": {}})
        for message in ("I wake on the shore.", "I walk to the chapel."):
            dm.send(message)
    with Proxy(web.url) as proxy, connect(proxy.url, designer_key, retries=0) as game:
        dm = game.Agent("dm", {"memory": {}})
        assert dm.ready
        proxy.cut_at(b'"turn"', forward=False)  # the studio answers; the answer never arrives

        with pytest.raises(StudioError) as lost:
            dm.send("I open the chapel door.")

        assert proxy.cut_done
    error = lost.value
    assert (error.status, error.code) == (None, "network_error")
    assert UUID.match(error.idempotency_key)  # the one the client made for this send
    with connect(web.url, designer_key) as io:
        dm = io.Agent("dm", {"memory": {}})
        turn = dm.turn_by_idempotency_key(error.idempotency_key)
        assert (turn["status"], turn["block"]) == ("completed", 3)
        assert "I open the chapel door." in turn["reply"]
        # Sending again under the key runs nothing more: the same turn.
        assert dm.send("I open the chapel door.", idempotency_key=error.idempotency_key)["id"] == turn["id"]
        assert [b["block"] for page in dm.history() for b in page["blocks"]] == [1, 2, 3]


def test_a_key_no_send_used_and_another_games_key_find_no_turn(io, web, outsider_key):
    dm = io.Agent("dm", {})
    turn = dm.send("Hello.", idempotency_key="hello-1")

    assert dm.turn_by_idempotency_key("hello-1")["id"] == turn["id"]
    assert dm.turn_by_idempotency_key("hello-2") is None
    assert io.Agent("inn", {}).turn_by_idempotency_key("hello-1") is None
    with connect(web.url, outsider_key) as elsewhere:
        assert elsewhere.Agent("dm", {}).turn_by_idempotency_key("hello-1") is None
    with pytest.raises(TypeError):
        dm.turn_by_idempotency_key("")


@pytest.fixture
def broke_key(db) -> str:
    return broke_game_key()


async def test_the_async_client_carries_the_key_and_finds_the_turn(web, designer_key, broke_key):
    async with connect_async(web.url, broke_key) as broke:
        with pytest.raises(StudioError) as refusal:
            await broke.Agent("dm", {}).send("Hello?", idempotency_key="broke-1")
    async with connect_async(web.url, designer_key) as io:
        dm = io.Agent("dm", {})
        turn = await dm.send("Hello.", idempotency_key="hello-async")
        found = await dm.turn_by_idempotency_key("hello-async")
        nothing = await dm.turn_by_idempotency_key("broke-1")

    assert (refusal.value.code, refusal.value.out_of_credits, refusal.value.idempotency_key) == (
        "budget_exhausted",
        True,
        "broke-1",
    )
    assert found == turn
    assert nothing is None
