"""The Python client runs the game's tools (#35), against a real studio:
Daphne on this run's PostgreSQL and Redis, the `scripted` model as its
default model, and a loopback model that calls several tools in one step
(tests/support/several_calls_model.py). A call answered by its function,
streamed or not; a function that raises; a call with no function here,
left to its deadline; a function told its deadline passed; two calls of
one step answered out of order; a turn cancelled elsewhere; a result too
long to keep; the asyncio twin; the innkeeper example."""

import asyncio
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from studio_client import StudioError, connect, connect_async, tool

from tests.support import several_calls_model
from tests.support.web import start_web, stop_web

from ..conftest import call, script, wait_for
from .test_python_client import Studio

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the servers it starts take this run's Redis"),
    pytest.mark.usefixtures("event_buffers_cleared", "stream_slots_cleared"),
]

ROOT = Path(__file__).resolve().parents[2]
GIVE = {
    "description": "Hand the player an item from the innkeeper's stock.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
}
PURSE = {"description": "How much gold the player carries.", "parameters": {"type": "object"}}
HANDING = script(call("give_item", item="key"), {"say": "Here."})


class ToolStudio(Studio):
    """The studio's web process, pointed at the several-calls model too."""

    def __init__(self, logs, model):
        self.processes, (self.url,) = start_web(
            logs,
            1,
            STUDIO_DEFAULT_MODEL="scripted",
            PYTHONUNBUFFERED="1",  # the access log as it is written
            **several_calls_model.environment(model),
        )
        self.log = logs / "web0.log"

    def answers(self, since: int = 0) -> list[int]:
        """The statuses of the tool results posted since request `since`."""
        return [status for _, path, status in self.requests()[since:] if path.endswith("/tool-results")]


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    model = several_calls_model.start()
    studio = ToolStudio(tmp_path_factory.mktemp("web"), model)
    yield studio
    stop_web(studio.processes)
    model.stop()


@pytest.fixture
def io(web, designer_key):
    with connect(web.url, designer_key) as io:
        yield io


def shown(turn) -> list[tuple]:
    return [(c["name"], c["result"], c["isError"]) for c in turn["toolCalls"]]


def test_a_call_of_a_game_tool_is_run_by_its_function_and_answered(io, web, designer_key):
    inventory, contexts = [], []

    @tool(**GIVE)
    def give_item(args, ctx):
        contexts.append(ctx)
        inventory.append(args["item"])
        return {"given": args["item"]}

    inn = io.Agent("inn", {"systemPrompt": "You keep the inn.", "tools": [give_item]})
    before = len(web.requests())

    turn = inn.send(HANDING)

    assert (turn["status"], turn["reply"]) == ("completed", "Here.")
    assert [(c["name"], c["arguments"], c["result"], c["isError"]) for c in turn["toolCalls"]] == [
        ("give_item", {"item": "key"}, '{"given": "key"}', False)
    ]
    assert inventory == ["key"]
    [ctx] = contexts
    assert (ctx.turn_id, ctx.name, ctx.cancelled.is_set()) == (turn["id"], "give_item", False)
    assert ctx.call_id and ctx.deadline
    defined = httpx.get(f"{web.url}/api/v1/agents/inn", headers={"Authorization": f"Bearer {designer_key}"})
    assert defined.json()["tools"] == [{"name": "give_item", **GIVE}]
    # The studio's 202 did not end the send: it followed the turn to its end.
    wait_for(lambda: web.answers(before) == [200])
    sends = [s for _, path, s in web.requests()[before:] if path == "/api/v1/agents/inn/messages"]
    assert sends == [202]
    assert give_item({"item": "ale"}, ctx) == {"given": "ale"}  # still a function


def test_a_streamed_send_runs_its_calls_too_and_a_tool_may_be_a_dict(io):
    inventory = []
    inn = io.Agent(
        "inn",
        tools=[
            {"name": "give_item", **GIVE, "run": lambda args, ctx: inventory.append(args["item"]) or "Given."}
        ],
    )
    pieces = []

    turn = inn.send(
        script(call("give_item", item="lamp"), {"say": "Mind the oil.", "sleep": 0.1}), on_text=pieces.append
    )

    assert (turn["status"], "".join(pieces)) == ("completed", "Mind the oil.")
    assert shown(turn) == [("give_item", "Given.", False)]
    assert inventory == ["lamp"]


LONG_ITEM = "a scroll that reads " + "on and on " * 600  # past the 4,000 characters an event shows


def test_long_arguments_cut_in_the_event_reach_the_function_whole(io):
    given = []
    inn = io.Agent(
        "inn", tools=[{"name": "give_item", **GIVE, "run": lambda args, ctx: given.append(args["item"])}]
    )

    # Streamed: the call is heard from tool.requested, whose arguments are cut.
    turn = inn.send(
        script(call("give_item", item=LONG_ITEM), {"say": "A long read."}), on_text=lambda piece: None
    )

    assert turn["status"] == "completed"
    assert given == [LONG_ITEM]


async def test_the_async_client_reads_cut_arguments_whole_too(web, designer_key):
    given = []

    @tool(**GIVE)
    async def give_item(args, ctx):
        given.append(args["item"])

    async with connect_async(web.url, designer_key) as io:
        inn = io.Agent("inn", {"tools": [give_item]})
        turn = await inn.send(
            script(call("give_item", item=LONG_ITEM), {"say": "A long read."}), on_text=lambda piece: None
        )

    assert turn["status"] == "completed"
    assert given == [LONG_ITEM]


def test_a_function_that_raises_answers_an_error_the_model_reads(io):
    @tool(**GIVE)
    def give_item(args, ctx):
        raise LookupError("The key is not in stock.")

    turn = io.Agent("inn", tools=[give_item]).send(HANDING)

    assert (turn["status"], turn["reply"]) == ("completed", "Here.")
    assert shown(turn) == [("give_item", "The key is not in stock.", True)]


def test_a_call_with_no_function_here_is_left_to_its_deadline(io, web):
    purses = []

    @tool(**PURSE)
    def look_up_purse(args, ctx):
        purses.append(ctx)
        return 12

    # give_item is declared, for other game code to run (here: none).
    inn = io.Agent("inn", tools=[{"name": "give_item", **GIVE, "timeoutSeconds": 1}, look_up_purse])
    assert inn.ready
    before = len(web.requests())

    turn = inn.send(HANDING)

    assert (turn["status"], turn["reply"]) == ("completed", "Here.")
    [(name, result, is_error)] = shown(turn)
    assert (name, is_error) == ("give_item", True) and "did not answer within 1 s" in result
    assert web.answers(before) == [] and purses == []


def test_a_function_still_running_at_the_deadline_is_told_and_sends_nothing(io, web):
    told = []

    @tool(**GIVE, timeout_seconds=1)
    def give_item(args, ctx):
        told.append(ctx.cancelled.wait(30))
        told.append(ctx.cancel_reason)
        return "Too late."

    inn = io.Agent("inn", tools=[give_item])
    assert inn.ready
    before = len(web.requests())

    turn = inn.send(HANDING)

    assert "did not answer within 1 s" in turn["toolCalls"][0]["result"]
    wait_for(lambda: len(told) == 2)
    assert told[0] is True and "deadline" in told[1]
    # Its thread has ended: whatever it was to send is sent.
    wait_for(lambda: not [t for t in threading.enumerate() if t.name == "studio-tool-give_item"])
    assert web.answers(before) == []


def test_two_calls_of_one_step_run_side_by_side_and_are_answered_in_any_order(io):
    purse_answered, order, answered = threading.Event(), [], []

    @tool(**GIVE)
    def give_item(args, ctx):
        assert purse_answered.wait(10)  # answered second, though called first
        order.append("give_item")
        return f"One {args['item']}."

    @tool(**PURSE)
    def look_up_purse(args, ctx):
        order.append("look_up_purse")
        return {"gold": 12}

    inn = io.Agent("inn", model=several_calls_model.MODEL, tools=[give_item, look_up_purse])

    def heard(event):
        answered.append(event["name"])
        if event["name"] == "look_up_purse":
            purse_answered.set()

    off = inn.on("tool.answered", heard)
    both = [{"call": "give_item", "args": {"item": "ale"}}, {"call": "look_up_purse", "args": {}}]

    turn = inn.send(script({"calls": both}, {"say": "Enjoy."}))
    wait_for(lambda: len(answered) == 2)
    off()

    assert (turn["status"], turn["reply"]) == ("completed", "Enjoy.")
    assert shown(turn) == [("give_item", "One ale.", False), ("look_up_purse", '{"gold": 12}', False)]
    assert order == answered == ["look_up_purse", "give_item"]


def test_a_waiting_turn_cancelled_elsewhere_ends_the_send_and_its_function_is_told(io, web, designer_key):
    started, told, box = queue.SimpleQueue(), [], {}

    @tool(**GIVE)
    def give_item(args, ctx):
        started.put(ctx.turn_id)
        told.append((ctx.cancelled.wait(30), ctx.cancel_reason))
        return "Too late."

    inn = io.Agent("inn", tools=[give_item])
    sending = threading.Thread(target=lambda: box.update(turn=inn.send(HANDING)))
    sending.start()
    turn_id = started.get(timeout=30)

    cancelled = httpx.post(
        f"{web.url}/api/v1/agents/inn/turns/{turn_id}/cancel",
        headers={"Authorization": f"Bearer {designer_key}"},
    )
    sending.join(30)

    assert cancelled.status_code == 202
    assert box["turn"]["status"] == "cancelled" and "turn ended" in box["turn"]["toolCalls"][0]["result"]
    wait_for(lambda: told)
    [(was_told, reason)] = told
    assert was_told and "turn ended" in reason


def test_a_result_the_studio_will_not_keep_is_answered_as_an_error_saying_why(io):
    @tool(**GIVE)
    def give_item(args, ctx):
        return "x" * 70_000

    turn = io.Agent("inn", tools=[give_item]).send(HANDING)

    [(_, result, is_error)] = shown(turn)
    assert is_error and "could not be kept" in result and "65,536" in result


def test_the_sync_client_refuses_a_coroutine_function_and_tools_that_are_not_a_list(io):
    @tool(**GIVE)
    async def give_item(args, ctx):
        return "never"

    with pytest.raises(TypeError, match="coroutine function"):
        io.Agent("inn", tools=[give_item])
    with pytest.raises(TypeError, match="list"):
        io.Agent("inn", tools={"give_item": GIVE})


async def test_the_async_client_runs_coroutine_and_plain_functions_one_step_after_another(web, designer_key):
    inventory, heard = [], []

    @tool(**GIVE)
    async def give_item(args, ctx):
        await asyncio.sleep(0)
        inventory.append(args["item"])
        return {"given": args["item"]}

    @tool(**PURSE)
    def look_up_purse(args, ctx):
        raise ValueError("The purse is sewn shut.")

    async with connect_async(web.url, designer_key) as io:
        inn = io.Agent("inn", {"tools": [give_item, look_up_purse]})
        steps = script(
            call("give_item", item="ale"), call("look_up_purse"), {"say": "Cheers.", "sleep": 0.05}
        )

        turn = await inn.send(steps, on_text=heard.append)
        plain = await inn.send(HANDING)

    assert (turn["status"], "".join(heard)) == ("completed", "Cheers.")
    assert shown(turn) == [
        ("give_item", '{"given": "ale"}', False),
        ("look_up_purse", "The purse is sewn shut.", True),
    ]
    assert (plain["status"], shown(plain)) == ("completed", [("give_item", '{"given": "key"}', False)])
    assert inventory == ["ale", "key"]


async def test_the_async_client_cancels_a_function_whose_deadline_passed(web, designer_key):
    told = []

    @tool(**GIVE, timeout_seconds=1)
    async def give_item(args, ctx):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            told.append((ctx.cancelled.is_set(), ctx.cancel_reason))
            raise
        return "Too late."

    async with connect_async(web.url, designer_key) as io:
        turn = await io.Agent("inn", tools=[give_item]).send(HANDING)
        await asyncio.wait_for(_until(lambda: told), 10)

    assert "did not answer within 1 s" in turn["toolCalls"][0]["result"]
    [(cancelled, reason)] = told
    assert cancelled and "deadline" in reason


async def _until(condition):
    while not condition():
        await asyncio.sleep(0.02)


def test_the_innkeeper_example_hands_over_items_through_give_item(web, designer_key):
    played = subprocess.run(
        [sys.executable, "examples/python_innkeeper.py"],
        input="/ask key\n/ask key\n/ask ale\n/pack\n/quit\n",
        env={**os.environ, "STUDIO_URL": web.url, "STUDIO_KEY": designer_key},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert played.returncode == 0, played.stdout + played.stderr
    assert '(give_item key: {"given": "key", "pack": ["key"]})' in played.stdout
    assert (
        "(give_item key: refused: There is no key left to give. The stock has: ale, lantern.)"
        in played.stdout
    )
    assert '(give_item ale: {"given": "ale", "pack": ["key", "ale"]})' in played.stdout
    assert "you carry: key, ale" in played.stdout
    assert played.stdout.endswith("You leave with: key, ale.\n")


def test_a_refused_tool_definition_is_the_studios_error(io):
    with pytest.raises(StudioError) as refused:
        assert io.Agent("inn", tools=[{"name": "open_memory", **GIVE}]).ready

    assert (refused.value.status, refused.value.code) == (400, "invalid_definition")
