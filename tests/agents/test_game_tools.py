"""Tools the game runs: defined with the agent, called by the model, the
turn waiting — in the database, in no process — for the game's answer
(or the call's deadline), then going on. Through the API, on the scripted
model, with the turn going on in a thread of the process that recorded
the last answer."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest

from agents.models import Block, Turn, TurnEntry, TurnStatus
from agents.sending.engine import waits_expire
from billing import ledger
from billing.models import Account, Adjustment, CostLine
from studio.live.events import agent_events_buffer
from tests.support.sending import turn_send

from ..conftest import call, error_of, events_published, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DM = "/api/v1/agents/dm"
GIVE = {
    "name": "give_item",
    "description": "Hand the player an item from the innkeeper's stock.",
    "parameters": {
        "type": "object",
        "properties": {"item": {"type": "string"}},
        "required": ["item"],
        "additionalProperties": False,
    },
}
LOOK = {
    "name": "look_up_purse",
    "description": "How much gold the player carries.",
    "parameters": {"type": "object"},
}
DEFINITION = {"systemPrompt": "You keep the inn.", "memory": {}, "tools": [GIVE, LOOK]}


@pytest.fixture
def innkeeper(api, game):
    response = api.put(DM, DEFINITION, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def send(api, content):
    return api.post(f"{DM}/messages", {"content": content}, format="json")


def answer(api, turn_id, call_id, **body):
    return api.post(f"{DM}/turns/{turn_id}/tool-results", {"callId": call_id, **body}, format="json")


def turn_of(api, turn_id) -> dict:
    return api.get(f"{DM}/turns/{turn_id}").json()["turn"]


def ended(api, turn_id) -> dict:
    wait_for(lambda: turn_of(api, turn_id)["status"] in ("completed", "failed", "cancelled"), timeout=30)
    return turn_of(api, turn_id)


def events_of(agent_id, turn_id, kind) -> list[dict]:
    events_published()
    return [e for e in agent_events_buffer(agent_id)[1] if e["type"] == kind and e.get("turnId") == turn_id]


def nested(depth: int) -> dict:
    """An object `depth` levels deep."""
    value: dict = {}
    for _ in range(depth):
        value = {"in": value}
    return value


# --- the definition ------------------------------------------------------------------------------


def test_a_definition_takes_the_games_tools_and_shows_them(api, innkeeper):
    assert innkeeper["tools"] == [GIVE, LOOK]
    again = api.put(DM, DEFINITION, format="json")
    assert again.status_code == 200 and again.json()["updatedAt"] == innkeeper["updatedAt"]  # wrote nothing
    context = api.get(f"{DM}/context").json()
    assert context["tools"] == ["open_memory", "close_memory", "delete_memory", "give_item", "look_up_purse"]
    without = api.put(DM, {**DEFINITION, "tools": []}, format="json").json()
    assert api.get(f"{DM}/context").json()["tokens"]["tools"] < context["tokens"]["tools"]
    assert without["tools"] == []


@pytest.mark.parametrize(
    "tools, said",
    [
        ([GIVE, GIVE], "two tools are named 'give_item'"),
        ([{**GIVE, "name": "open_memory"}], "the studio's own tool"),
        ([{**GIVE, "parameters": {"type": "string"}}], "a JSON Schema of an object"),
        (
            [{**GIVE, "parameters": {"type": "object", "properties": {"item": {"type": "nonsense"}}}}],
            "not a valid JSON Schema",
        ),
        ([{**GIVE, "timeoutSeconds": 0}], "timeoutSeconds"),
        ([{**GIVE, "name": "give item"}], "1–64 characters"),
        ([{**GIVE, "name": "write_checkpoint"}], "the studio's own tool"),
        ([{**GIVE, "description": "   "}], "description: This field may not be blank"),
        ([{**GIVE, "description": "x" * 1025}], "no more than 1024 characters"),
        ([{**GIVE, "cost": 3}], "tools[0].cost: is not a field here"),
        ([{**GIVE, "timeoutSeconds": 3601}], "from 1 to 3,600 (STUDIO_MAX_TOOL_TIMEOUT_SECONDS)"),
        ([{**GIVE, "timeoutSeconds": True}], "timeoutSeconds: must be a whole number"),
        ([{**GIVE, "parameters": {"type": "object", "nest": nested(16)}}], "nested deeper than 16 levels"),
        (
            [
                {
                    **GIVE,
                    "parameters": {
                        "type": "object",
                        "properties": {f"p{i}": {"type": "string"} for i in range(600)},
                    },
                }
            ],
            "at most 16,384 bytes",
        ),
        ("give_item", "tools: Expected a list"),
    ],
)
def test_a_tool_definition_the_studio_cannot_offer_is_refused_saying_why(api, game, tools, said):
    response = api.put(DM, {**DEFINITION, "tools": tools}, format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] in ("invalid_definition", "invalid_request")
    assert said in error_of(response)["message"]


def test_too_many_tools_are_refused(api, game, studio_conf):
    studio_conf(MAX_GAME_TOOLS=1)

    response = api.put(DM, DEFINITION, format="json")

    assert response.status_code == 400 and "at most 1" in error_of(response)["message"]


# --- a turn that waits for the game -------------------------------------------------------------------


def test_a_call_of_a_game_tool_waits_for_the_games_answer_then_the_turn_goes_on(api, innkeeper, agent_row):
    sent = send(api, script(call("give_item", item="the silver key"), {"say": "Here is your key."}))

    assert sent.status_code == 202 and sent["Location"].endswith(f"/turns/{sent.json()['turn']['id']}")
    turn = sent.json()["turn"]
    assert turn["status"] == "waiting"
    [pending] = turn["pendingToolCalls"]
    assert (pending["name"], pending["arguments"]) == ("give_item", {"item": "the silver key"})
    [requested] = events_of(agent_row().pk, turn["id"], "tool.requested")
    assert requested["callId"] == pending["callId"] and requested["deadline"] == pending["deadline"]

    answered = answer(api, turn["id"], pending["callId"], result={"given": True})

    assert answered.status_code == 200
    done = ended(api, turn["id"])
    assert (done["status"], done["reply"]) == ("completed", "Here is your key.")
    [given] = done["toolCalls"]
    assert (given["name"], given["result"], given["isError"]) == ("give_item", '{"given": true}', False)
    [told] = events_of(agent_row().pk, turn["id"], "tool.answered")
    assert (told["by"], told["result"]) == ("game", '{"given": true}')
    block = Block.objects.get(turn__uuid=done["id"])
    assert [e["type"] for e in block.entries] == ["message", "tool_call", "message"]
    assert not TurnEntry.objects.exists()
    # No memory fee for the game's tools; the model's two steps charged.
    assert [line["kind"] for line in done["cost"]["lines"]] == ["model"]
    assert CostLine.objects.get(turn_id=done["id"], kind="model").detail["calls"] == 2


def test_a_game_that_reads_the_turn_as_it_hears_tool_requested_finds_the_call_pending(
    api, innkeeper, monkeypatch
):
    """The clients read long arguments from the turn's pendingToolCalls when
    the event says it cut them: the event goes out once the turn waits, so a
    read as it is heard lists the call (a turn still `running` lists none)."""
    from studio.live import events

    heard_while = []
    send_event = events._send

    def read_as_heard(agent_id, event):
        if event["type"] == "tool.requested":
            heard_while.append(Turn.objects.get(uuid=event["turnId"]).status)
        send_event(agent_id, event)

    monkeypatch.setattr(events, "_send", read_as_heard)
    turn = send(api, script(call("give_item", item="a scroll"), {"say": "A long read."})).json()["turn"]

    assert heard_while == [TurnStatus.WAITING]
    assert [p["arguments"] for p in turn_of(api, turn["id"])["pendingToolCalls"]] == [{"item": "a scroll"}]


def test_two_calls_in_one_step_are_answered_one_by_one_in_any_order(api, innkeeper, monkeypatch):
    from agents.providers.base import ModelReply, ToolCall, Usage
    from agents.providers.scripted import ScriptedProvider

    original = ScriptedProvider.complete

    def both(self, request, control):
        if any(m["role"] == "tool" for m in request.messages):
            return original(self, request, control)
        calls = [ToolCall("c1", "give_item", {"item": "ale"}), ToolCall("c2", "look_up_purse", {})]
        return ModelReply(text=None, tool_calls=calls, usage=Usage(10, 5))

    monkeypatch.setattr(ScriptedProvider, "complete", both)
    turn = send(api, "An ale, and can I pay?").json()["turn"]
    assert [p["callId"] for p in turn["pendingToolCalls"]] == ["c1", "c2"]

    second = answer(api, turn["id"], "c2", result="12 gold")
    assert second.json()["turn"]["status"] == "waiting"
    assert [p["callId"] for p in second.json()["turn"]["pendingToolCalls"]] == ["c1"]
    answer(api, turn["id"], "c1", error="Out of ale.")

    done = ended(api, turn["id"])
    assert done["status"] == "completed"
    assert [(c["name"], c["result"], c["isError"]) for c in done["toolCalls"]] == [
        ("give_item", "Out of ale.", True),
        ("look_up_purse", "12 gold", False),
    ]


def test_answers_for_no_such_call_twice_or_after_the_end_are_refused_and_change_nothing(
    api, innkeeper, outsider
):
    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]
    call_id = turn["pendingToolCalls"][0]["callId"]

    unknown = answer(api, turn["id"], "call_nope", result="x")
    elsewhere = outsider.post(
        f"{DM}/turns/{turn['id']}/tool-results", {"callId": call_id, "result": "x"}, format="json"
    )
    neither = answer(api, turn["id"], call_id)
    first = answer(api, turn["id"], call_id, result="a map")
    ended(api, turn["id"])
    again = answer(api, turn["id"], call_id, result="another map")

    assert (unknown.status_code, error_of(unknown)["code"]) == (409, "unknown_call")
    assert error_of(neither)["message"].startswith("An answer has either")
    assert elsewhere.status_code == 404
    assert (neither.status_code, error_of(neither)["code"]) == (400, "invalid_request")
    assert first.status_code == 200
    assert (again.status_code, error_of(again)["code"]) == (409, "turn_ended")
    assert turn_of(api, turn["id"])["toolCalls"][0]["result"] == "a map"


def test_a_call_the_game_does_not_answer_in_time_gets_an_error_the_model_reads(api, game):
    api.put(DM, {**DEFINITION, "tools": [{**GIVE, "timeoutSeconds": 1}]}, format="json")

    turn = send(api, script(call("give_item", item="a lantern"), {"say": "Never mind, then."})).json()["turn"]

    done = ended(api, turn["id"])
    assert (done["status"], done["reply"]) == ("completed", "Never mind, then.")
    [unanswered] = done["toolCalls"]
    assert unanswered["isError"] and "did not answer within 1 s" in unanswered["result"]


def test_a_later_calls_deadline_is_watched_once_the_earlier_one_passed(api, game, two_calls):
    tools = [{**GIVE, "timeoutSeconds": 1}, {**LOOK, "timeoutSeconds": 3}]
    api.put(DM, {**DEFINITION, "tools": tools}, format="json")

    turn = send(api, "An ale, and can I pay?").json()["turn"]

    # No sweep runs here, and nobody reads the turn meanwhile (a read looks
    # at its deadlines): the process that left it waiting goes on at the second.
    wait_for(lambda: Turn.objects.get(uuid=turn["id"]).status == TurnStatus.COMPLETED, timeout=30)
    done = turn_of(api, turn["id"])
    assert [(c["name"], c["isError"]) for c in done["toolCalls"]] == [
        ("give_item", True),
        ("look_up_purse", True),
    ]


@pytest.mark.parametrize("answered_first", [False, True], ids=["unanswered", "answered"])
def test_a_turn_cancelled_before_it_waits_closes_its_game_calls(
    api, innkeeper, agent_row, event_buffers_cleared, monkeypatch, answered_first
):
    from agents.sending import engine, waits

    wait = engine._TurnRun._wait

    def cancelled_first(self, step, stop):
        # Between recording the call and waiting (tool.requested goes out
        # with the wait): the game may answer, then a cancel lands.
        [row] = TurnEntry.objects.filter(turn=self.turn, waiting=True)
        if answered_first:
            waits.answer_record(agent=self.agent, turn_id=self.turn.uuid, call_id=row.call_id, result="a map")
        Turn.objects.filter(pk=self.turn.pk).update(cancel_requested=True)
        return wait(self, step, stop)

    monkeypatch.setattr(engine._TurnRun, "_wait", cancelled_first)
    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]

    done = ended(api, turn["id"])
    assert done["status"] == "cancelled"
    [kept] = [e for e in Block.objects.get(turn__uuid=turn["id"]).entries if e["type"] == "tool_call"]
    assert "pending" not in kept
    if answered_first:
        assert (kept["result"], kept["isError"]) == ("a map", False)
    else:
        assert kept["isError"] and "ended" in kept["result"]
        [told] = events_of(agent_row().pk, turn["id"], "tool.answered")
        assert told["by"] == "turn_ended"


def test_a_wait_no_process_looks_at_any_more_is_ended_by_the_sweep(api, game, monkeypatch):
    from agents.sending import engine

    monkeypatch.setattr(engine._deadlines, "add", lambda *args: None)  # as if its process had stopped
    api.put(DM, {**DEFINITION, "tools": [{**GIVE, "timeoutSeconds": 1}]}, format="json")
    turn = send(api, script(call("give_item", item="a lantern"), {"say": "Never mind."})).json()["turn"]
    wait_for(lambda: TurnEntry.objects.filter(deadline__lt=_now()).exists(), timeout=10)
    assert turn_of(api, turn["id"])["status"] == "waiting"

    assert waits_expire()

    assert ended(api, turn["id"])["reply"] == "Never mind."


def test_a_waiting_turn_can_be_cancelled_and_its_calls_say_so(api, innkeeper, game):
    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]

    cancelled = api.post(f"{DM}/turns/{turn['id']}/cancel")

    assert cancelled.status_code == 202
    done = turn_of(api, turn["id"])
    assert done["status"] == "cancelled"
    assert "turn ended" in done["toolCalls"][0]["result"]
    account = Account.objects.get(game=game)
    assert (account.held, account.live_turns) == (0, 0)  # its hold went back with it


def test_a_waiting_turn_keeps_its_hold(api, innkeeper, game):
    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]

    account = Account.objects.get(game=game)
    assert account.held == Turn.objects.get(uuid=turn["id"]).held > 0
    assert account.live_turns == 1


def test_the_next_send_queues_behind_a_waiting_turn(api, innkeeper):
    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]
    later = api.post(f"{DM}/messages", {"content": "Hello?", "wait": False}, format="json").json()["turn"]

    assert turn_of(api, later["id"])["status"] == "queued"
    answer(api, turn["id"], turn["pendingToolCalls"][0]["callId"], result="ok")

    assert ended(api, later["id"])["status"] == "completed"


def test_a_transient_send_is_offered_no_game_tools(api, innkeeper):
    response = api.post(
        f"{DM}/messages",
        {"content": script(call("give_item", item="a map"), {"say": "Just words."}), "transient": True},
        format="json",
    )

    assert response.status_code == 200
    assert (response.json()["turn"]["reply"], response.json()["turn"]["toolCalls"]) == ("Just words.", [])


def _now():
    from django.utils import timezone

    return timezone.now()


@pytest.fixture
def agent_row(game):
    from agents.models import Agent

    return lambda: Agent.objects.get(game=game, name="dm")


def test_a_game_tool_called_through_the_engine_leaves_the_send_waiting(innkeeper, agent_row):
    sent = turn_send(agent=agent_row(), content=script(call("look_up_purse"), {"say": "Rich."}))

    assert sent.status == TurnStatus.WAITING


def test_a_null_result_is_a_result(api, innkeeper):
    turn = send(api, script(call("give_item", item="nothing"), {"say": "Hm."})).json()["turn"]

    answered = answer(api, turn["id"], turn["pendingToolCalls"][0]["callId"], result=None)

    assert answered.status_code == 200
    assert ended(api, turn["id"])["toolCalls"][0]["result"] == "null"


# --- arguments the game is not asked with ------------------------------------------------------


@pytest.mark.parametrize(
    "args, said",
    [
        ('{"item": "a map"', "The arguments for give_item were not valid JSON"),
        ("[1, 2]", "give_item takes an object of arguments"),
        ([1, 2], "give_item takes an object of arguments"),
        ({"item": {"a": {"b": {"c": {"d": "deep"}}}}}, "are nested deeper than 4 levels"),
        ({"item": "x" * 600}, "over the 500 bytes the studio reads"),
    ],
)
def test_arguments_the_game_could_not_read_are_the_models_error_and_nothing_waits(
    api, innkeeper, agent_row, studio_conf, args, said
):
    studio_conf(MAX_OUTPUT_DEPTH=4, MAX_TOOL_ARGUMENTS_BYTES=500)

    sent = send(api, script({"call": "give_item", "args": args}, {"say": "Sorry."}))

    assert sent.status_code == 200, sent.content
    done = sent.json()["turn"]
    assert (done["status"], done["reply"]) == ("completed", "Sorry.")
    [refused] = done["toolCalls"]
    assert refused["isError"] and said in refused["result"] and "the game was not asked" in refused["result"]
    assert events_of(agent_row().pk, done["id"], "tool.requested") == []
    assert [line["kind"] for line in done["cost"]["lines"]] == ["model"]


def test_long_arguments_are_cut_in_tool_requested_and_whole_in_pending_tool_calls(
    api, innkeeper, agent_row, studio_conf
):
    studio_conf(SHOWN_TEXT_MAX_CHARS=100)
    item = "a lantern of " + "brass " * 100

    turn = send(api, script(call("give_item", item=item), {"say": "Here."})).json()["turn"]

    [requested] = events_of(agent_row().pk, turn["id"], "tool.requested")
    whole = len(json.dumps({"item": item}, ensure_ascii=False))
    assert requested["cut"] == {"block": 1, "arguments": whole}
    assert len(requested["arguments"]["item"]) == 101 and requested["arguments"]["item"].endswith("…")
    assert turn_of(api, turn["id"])["pendingToolCalls"][0]["arguments"] == {"item": item}


# --- an answer claimed by a process that stopped --------------------------------------------------


def test_a_turn_claimed_by_an_answer_whose_process_stopped_is_gone_on_with_by_the_sweep(
    api, innkeeper, monkeypatch
):
    from agents.sending import engine
    from agents.sweep import sweep

    turn = send(api, script(call("give_item", item="a map"), {"say": "There you are."})).json()["turn"]
    with monkeypatch.context() as stopped:
        # As if the process that recorded the answer stopped before going on with the turn.
        stopped.setattr(engine, "turn_resume", lambda turn: None)
        answered = answer(api, turn["id"], turn["pendingToolCalls"][0]["callId"], result="a map")
    assert answered.json()["turn"]["status"] == "running"
    Turn.objects.filter(uuid=turn["id"]).update(lease_until=_now())  # its lease lapsed

    assert sweep()

    done = ended(api, turn["id"])
    assert (done["status"], done["reply"]) == ("completed", "There you are.")
    assert done["toolCalls"][0]["result"] == "a map"


def test_a_send_queued_behind_a_stalled_turn_waits_for_it_to_go_on_first(api, innkeeper, monkeypatch):
    from agents.sending import engine
    from agents.sweep import sweep

    turn = send(api, script(call("give_item", item="a map"), {"say": "There you are."})).json()["turn"]
    with monkeypatch.context() as stopped:
        stopped.setattr(engine, "turn_resume", lambda turn: None)
        answer(api, turn["id"], turn["pendingToolCalls"][0]["callId"], result="a map")
    Turn.objects.filter(uuid=turn["id"]).update(lease_until=_now())

    later = api.post(f"{DM}/messages", {"content": "Thanks!", "wait": False}, format="json").json()["turn"]

    # The queued send saw it stalled: waiting again, answered, for the sweep.
    wait_for(lambda: turn_of(api, turn["id"])["status"] == "waiting")
    assert turn_of(api, turn["id"])["pendingToolCalls"] == []
    assert turn_of(api, later["id"])["status"] == "queued"
    assert sweep()
    assert ended(api, turn["id"])["reply"] == "There you are."
    assert ended(api, later["id"])["status"] == "completed"


def test_answers_that_come_before_the_turn_has_begun_to_wait_let_it_go_on(api, innkeeper, monkeypatch):
    from agents.sending import engine, waits

    original = engine._TurnRun._wait

    def answered_first(self, step, stop):
        # The game heard tool.requested and answered while the turn was still running.
        [row] = TurnEntry.objects.filter(turn=self.turn, waiting=True)
        waits.answer_record(agent=self.agent, turn_id=self.turn.uuid, call_id=row.call_id, result="quick")
        return original(self, step, stop)

    monkeypatch.setattr(engine._TurnRun, "_wait", answered_first)

    sent = send(api, script(call("give_item", item="a map"), {"say": "That was quick."}))

    done = ended(api, sent.json()["turn"]["id"])
    assert (done["status"], done["reply"]) == ("completed", "That was quick.")
    assert done["toolCalls"][0]["result"] == "quick"


def test_a_resumed_turn_whose_process_stopped_mid_step_ends_as_stopped(api, innkeeper):
    from agents.sending.turn_slot import turns_reap

    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]
    # Taken up by a process (its run state cleared as it went on) that then stopped.
    Turn.objects.filter(uuid=turn["id"]).update(status="running", run_state=None, lease_until=_now())
    TurnEntry.objects.filter(turn__uuid=turn["id"]).update(waiting=False)

    assert turns_reap()

    done = turn_of(api, turn["id"])
    assert (done["status"], done["errorCode"]) == ("failed", "process_stopped")


# --- what was not tested ------------------------------------------------------------------------


def test_a_second_answer_to_a_call_while_the_turn_still_waits_is_refused_and_changes_nothing(
    api, innkeeper, two_calls
):
    turn = send(api, "An ale, and can I pay?").json()["turn"]
    first = answer(api, turn["id"], "c1", result="an ale")

    again = answer(api, turn["id"], "c1", error="Out of ale.")

    assert first.status_code == 200 and first.json()["turn"]["status"] == "waiting"
    assert (again.status_code, error_of(again)["code"]) == (409, "call_answered")
    assert turn_of(api, turn["id"])["status"] == "waiting"
    answer(api, turn["id"], "c2", result="12 gold")
    done = ended(api, turn["id"])
    assert [(c["result"], c["isError"]) for c in done["toolCalls"]] == [("an ale", False), ("12 gold", False)]


def test_a_turn_that_waits_past_the_turn_deadline_ends_failed_saying_so(api, innkeeper, studio_conf):
    from agents.sweep import sweep

    turn = send(api, script(call("give_item", item="a map"), {"say": "There."})).json()["turn"]
    assert turn["status"] == "waiting"
    studio_conf(TURN_DEADLINE_SECONDS=1)
    created = Turn.objects.get(uuid=turn["id"]).created_at
    wait_for(lambda: _now() > created + timedelta(seconds=1.1))

    assert sweep()

    done = turn_of(api, turn["id"])
    assert (done["status"], done["errorCode"]) == ("failed", "deadline")
    assert "STUDIO_TURN_DEADLINE_SECONDS" in done["error"]
    assert "turn ended" in done["toolCalls"][0]["result"]


def test_the_per_step_bound_applies_to_game_tool_calls(api, innkeeper, two_calls, studio_conf):
    studio_conf(MAX_TOOL_CALLS_PER_STEP=1)

    turn = send(api, "An ale, and can I pay?").json()["turn"]

    assert [p["callId"] for p in turn["pendingToolCalls"]] == ["c1"]
    answer(api, turn["id"], "c1", result="an ale")
    done = ended(api, turn["id"])
    assert done["status"] == "completed"
    refused = done["toolCalls"][1]
    assert refused["name"] == "look_up_purse" and refused["isError"]
    assert "the studio runs at most 1 in one step" in refused["result"]


def test_the_per_turn_bound_applies_to_game_tool_calls(api, innkeeper, studio_conf):
    studio_conf(MAX_TOOL_CALLS_PER_TURN=1)
    turn = send(
        api, script(call("give_item", item="ale"), call("give_item", item="bread"), {"say": "Enjoy."})
    ).json()["turn"]
    answer(api, turn["id"], turn["pendingToolCalls"][0]["callId"], result="ale")

    done = ended(api, turn["id"])

    assert (done["status"], done["cutShort"]["code"]) == ("completed", "too_many_tool_calls")
    assert done["reply"] == "Enjoy."
    second = done["toolCalls"][1]
    assert second["isError"] and "this turn has made 1 tool calls" in second["result"]
    assert TurnEntry.objects.count() == 0  # nothing waits any more


def test_the_per_turn_bound_met_in_a_step_that_waits_stops_the_turn_once_the_game_answers(
    api, innkeeper, two_calls, studio_conf
):
    studio_conf(MAX_TOOL_CALLS_PER_TURN=1)

    turn = send(api, "An ale, and can I pay?").json()["turn"]

    assert [p["callId"] for p in turn["pendingToolCalls"]] == ["c1"]
    answer(api, turn["id"], "c1", result="an ale")
    done = ended(api, turn["id"])
    assert done["cutShort"]["code"] == "too_many_tool_calls"
    assert [c["result"] for c in done["toolCalls"]][0] == "an ale"


# --- money after a wait ------------------------------------------------------------------------


def set_balance(game, amount: Decimal) -> None:
    amount = ledger.credits(amount)
    Account.objects.filter(game=game).update(balance=amount)
    Adjustment.objects.filter(game=game).update(amount=amount)


def test_the_hold_stays_while_the_turn_waits_and_covers_the_steps_after(api, innkeeper, game, agent_row):
    hold = ledger.hold_estimate(max_tokens=agent_row().max_tokens, price=ledger.model_price("scripted"))
    set_balance(game, hold * Decimal("1.5"))
    api.put("/api/v1/agents/bard", {"systemPrompt": "You sing.", "memory": None}, format="json")
    turn = send(api, script(call("give_item", item="ale"), {"say": "Cheers."})).json()["turn"]

    refused = api.post("/api/v1/agents/bard/messages", {"content": "A song!"}, format="json")

    assert refused.status_code == 402  # what is left beside the waiting turn's hold cannot pay for another
    answer(api, turn["id"], turn["pendingToolCalls"][0]["callId"], result="ale")
    assert ended(api, turn["id"])["status"] == "completed"
    account = Account.objects.get(game=game)
    assert account.balance >= 0 and (account.held, account.live_turns) == (0, 0)


def test_credits_that_ran_out_while_the_turn_waited_stop_it_never_the_balance_below_zero(
    api, innkeeper, game
):
    turn = send(api, script(call("give_item", item="ale"), {"say": "Cheers."})).json()["turn"]
    set_balance(game, Decimal("0.000001"))  # taken out by an operator while the game thought

    answer(api, turn["id"], turn["pendingToolCalls"][0]["callId"], result="ale")

    done = ended(api, turn["id"])
    assert done["status"] == "failed" and done["errorCode"] == "budget_exhausted"
    account = Account.objects.get(game=game)
    assert account.balance == Decimal("0.000001")
    assert (account.held, account.live_turns) == (0, 0)


@pytest.fixture
def two_calls(monkeypatch):
    """The model calls give_item (c1) and look_up_purse (c2) in its first step."""
    from agents.providers.base import ModelReply, ToolCall, Usage
    from agents.providers.scripted import ScriptedProvider

    original = ScriptedProvider.complete

    def both(self, request, control):
        if any(m["role"] == "tool" for m in request.messages) or not request.tools:
            return original(self, request, control)
        calls = [ToolCall("c1", "give_item", {"item": "ale"}), ToolCall("c2", "look_up_purse", {})]
        return ModelReply(text=None, tool_calls=calls, usage=Usage(10, 5))

    monkeypatch.setattr(ScriptedProvider, "complete", both)
