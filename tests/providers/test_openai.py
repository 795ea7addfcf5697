"""The `openai:` provider, end to end: turns through the engine and the
official SDK against a real HTTP server on loopback (tests/support/fake_openai.py)."""

import json
from decimal import Decimal

import pytest

from agents.compaction import CompactionRetry, compaction_request, compaction_run
from agents.models import Block, Checkpoint, Compaction, CompactionReason, CompactionStatus, Turn, TurnStatus
from agents.providers.base import CALL_THREADS
from agents.providers.openai_chat import OpenAIProvider
from agents.providers.prompts import COMPACTION_SCHEMA, COMPACTOR_INSTRUCTIONS, TOOL_SPECS
from agents.sending.context import context_assemble
from agents.sending.turn_slot import turn_cancel
from agents.wire import turn_cost, turn_tool_calls
from billing.models import Account, CostLine, ModelPrice
from memories.models import Memory, Writer
from memories.tools import MEMORY_TOOLS
from studio.tokens import count_tokens
from tests.support.fake_openai import FakeOpenAI, compaction_answer, completion, error, raw, tool_call
from tests.support.sending import turn_send

from ..conftest import in_thread, quest_checkpoint, wait_for
from .conftest import LATER_THAN_ANY_WAIT, TOOL_CALL_THEN_REPLY, entry_kinds, failure_logged, send_each

MODEL = "openai:gpt-test"
SYSTEM = "You are the dungeon master."
QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the key."}


@pytest.fixture
def dm(define, fake_openai):
    return define("dm", model=MODEL, system_prompt=SYSTEM)


def _checkpoint(agent, through: int):
    return quest_checkpoint(agent, through=through)


def _line(turn, kind="model") -> CostLine | None:
    return CostLine.objects.filter(turn_id=turn.uuid, kind=kind).first()


def _amount(price: ModelPrice, prompt: int, output: int, cached: int = 0) -> Decimal:
    """By hand: uncached input, cached input and output, per million tokens."""
    raw_amount = (
        (prompt - cached) * price.input_per_mtok
        + cached * price.cached_input_per_mtok
        + output * price.output_per_mtok
    ) / Decimal(1_000_000)
    return raw_amount.quantize(Decimal("0.000001"))


# --- a turn -----------------------------------------------------------------------------------


def test_a_tool_call_then_text_goes_through_the_sdk_and_is_recorded(dm, fake_openai, settings):
    fake_openai.push(completion("The chapel is cold."))
    turn_send(agent=dm, content="I enter the chapel.")
    checkpoint = _checkpoint(dm, through=1)
    fake_openai.push(
        completion(tool_calls=[tool_call("close_memory", QUEST, id="call_q1")]),
        completion("Noted, traveller."),
    )

    turn = turn_send(agent=dm, content="Remember what I am looking for.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Noted, traveller.")
    memory = Memory.objects.get(agent=dm, name="quest")
    assert (memory.content, memory.is_open) == ("Find the key.", False)
    assert entry_kinds(turn) == TOOL_CALL_THEN_REPLY
    entries = Block.objects.get(turn=turn).entries
    assert (entries[1]["id"], entries[1]["arguments"], entries[1]["isError"]) == ("call_q1", QUEST, False)

    first, second = fake_openai.requests[1:]
    assert first["path"] == "/v1/chat/completions"
    assert first["headers"]["authorization"] == "Bearer test-key"
    body = first["body"]
    assert body["model"] == "gpt-test"
    assert body["max_completion_tokens"] == settings.STUDIO["MODEL_MAX_OUTPUT_TOKENS"]
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": checkpoint.context_block},
        {"role": "user", "content": "Remember what I am looking for."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": TOOL_SPECS[name]["description"],
                "parameters": TOOL_SPECS[name]["parameters"],
            },
        }
        for name in MEMORY_TOOLS
    ]
    assert second["body"]["messages"][3:] == [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_q1",
                    "type": "function",
                    "function": {"name": "close_memory", "arguments": json.dumps(QUEST, sort_keys=True)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_q1", "content": entries[1]["result"]},
    ]
    assert _line(turn).detail["calls"] == 2


@pytest.fixture
def kept(define, settings, studio_conf):
    """(agent, fake): a fake that keeps its connections, as real providers do."""
    fake = FakeOpenAI(keep_alive=True).start()
    settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY = fake.base_url, "test-key"
    studio_conf(MODEL_MAX_RETRIES=0, MODEL_TIMEOUT_SECONDS=10)
    yield define("dm", model=MODEL, system_prompt=SYSTEM), fake
    fake.stop()


def test_streamed_answers_leave_the_connection_for_the_next_call(kept):
    dm, fake = kept
    fake.push(
        completion(tool_calls=[tool_call("close_memory", QUEST)]),
        completion("Noted."),
        completion("Again."),
        completion("And again."),
    )
    for content in ("One.", "Two.", "Three."):
        assert turn_send(agent=dm, content=content).status == TurnStatus.COMPLETED

    assert len(fake.requests) == 4
    assert fake.connections == 1  # read to its end, each answer leaves it open


def test_a_kept_connection_that_breaks_mid_answer_fails_the_turn_as_the_models(kept):
    dm, fake = kept
    fake.push(completion("The chapel is cold and dark.", cut_after=2))

    turn = turn_send(agent=dm, content="I enter the chapel.")

    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "model_error")
    assert "broke off" in turn.error


def test_the_next_turn_sees_the_earlier_tool_calls_from_history(dm, fake_openai):
    fake_openai.push(
        completion("Let me note that.", tool_calls=[tool_call("open_memory", {"name": "nope"}, id="c1")]),
        completion("Nothing there."),
        completion("Still here."),
    )
    turn_send(agent=dm, content="Open your notes.")

    turn_send(agent=dm, content="And now?")

    history = fake_openai.bodies[2]["messages"][1:]
    assert history[0] == {"role": "user", "content": "Open your notes."}
    assert history[1]["content"] == "Let me note that."
    assert history[1]["tool_calls"][0]["function"] == {"name": "open_memory", "arguments": '{"name": "nope"}'}
    assert history[2]["role"] == "tool" and history[2]["content"].startswith("Error: ")
    assert history[3:] == [
        {"role": "assistant", "content": "Nothing there."},
        {"role": "user", "content": "And now?"},
    ]


def test_history_sent_again_on_later_calls_is_the_same_on_the_wire(dm, fake_openai):
    """Each history message is encoded once per process and reused: later
    calls must still carry it exactly, non-ASCII text included."""
    fake_openai.push(
        completion("", tool_calls=[tool_call("open_memory", {"name": "café"}, id="c1")]),
        completion("Ilsa’s café is shut — «fermé»."),
        completion("Noted."),
        completion("Still noted."),
    )
    send_each(dm, "Où est Ilsa ?", "Et maintenant ?", "Encore ?")

    second_turn, third_turn = fake_openai.bodies[2]["messages"], fake_openai.bodies[3]["messages"]
    assert third_turn[: len(second_turn)] == second_turn
    assert second_turn[1] == {"role": "user", "content": "Où est Ilsa ?"}
    assert second_turn[2]["tool_calls"][0]["function"] == {
        "name": "open_memory",
        "arguments": '{"name": "café"}',
    }
    assert second_turn[4] == {"role": "assistant", "content": "Ilsa’s café is shut — «fermé»."}
    assert third_turn[len(second_turn) :] == [
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Encore ?"},
    ]


def test_a_tool_call_is_the_same_bytes_after_the_database_gave_it_back(dm, fake_openai):
    """PostgreSQL's jsonb keeps an object's keys in its own order: read back,
    a call must still be sent as it was (provider prompt caches match bytes)."""
    arguments = {"name": "quest", "description": "What the player wants", "content": "Find the key."}
    fake_openai.push(
        completion("", tool_calls=[tool_call("close_memory", arguments, id="c1")]),
        completion("Noted."),
        completion("Still noted."),
    )
    send_each(dm, "Remember the key.", "And now?")

    in_turn, next_turn = fake_openai.bodies[1]["messages"], fake_openai.bodies[2]["messages"]
    assert next_turn[: len(in_turn)] == in_turn  # the first turn, call and result included


# --- failures ---------------------------------------------------------------------------------


def test_a_rate_limit_is_retried_by_the_sdk_and_the_turn_completes(dm, fake_openai):
    fake_openai.push(error(429, "Rate limit reached.", type="rate_limit_error"), completion("At last."))

    turn = turn_send(agent=dm, content="Hello?")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "At last.")
    assert len(fake_openai.requests) == 2
    assert [r["headers"]["x-stainless-retry-count"] for r in fake_openai.requests] == ["0", "1"]
    assert _line(turn).detail["calls"] == 1


def test_a_server_that_keeps_failing_fails_the_turn_and_keeps_what_was_done(dm, fake_openai, game, caplog):
    fake_openai.push(completion(tool_calls=[tool_call("close_memory", QUEST)], usage=(100, 20)))
    fake_openai.always(error(500, "The server is on fire."))
    before = Account.objects.get(game=game).balance

    turn = turn_send(agent=dm, content="Remember the key.")

    assert turn.status == TurnStatus.FAILED
    assert "answered 500 (server error)" in turn.error
    assert "answered 500 (server error) after 2 retries: The server is on fire." in failure_logged(
        caplog, turn
    )
    assert len(fake_openai.requests) == 4  # one good call, then a failing one tried 3 times
    assert Memory.objects.get(agent=dm, name="quest").content == "Find the key."
    block = Block.objects.get(turn=turn)
    assert block.status == TurnStatus.FAILED
    assert [e["type"] for e in block.entries] == ["message", "tool_call"]
    price = ModelPrice.objects.get(model="*")
    model_line = _line(turn)
    assert (model_line.quantity, model_line.detail["calls"]) == (120, 1)
    assert model_line.amount == _amount(price, 100, 20)
    fee = _line(turn, "memory_access").amount
    assert Account.objects.get(game=game).balance == before - model_line.amount - fee


def test_a_timeout_fails_the_turn_saying_so(dm, fake_openai, studio_conf, caplog):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, MODEL_MAX_RETRIES=0)
    # An answer far later than the test would wait (it ends when the fake stops).
    fake_openai.push(completion("Too late.", delay=LATER_THAN_ANY_WAIT))
    sent = context_assemble(dm).total_tokens + count_tokens("Quick!")

    turn = turn_send(agent=dm, content="Quick!")

    assert turn.status == TurnStatus.FAILED
    assert "did not answer in time" in turn.error
    assert "timed out: no answer within 0.5 s" in failure_logged(caplog, turn)
    # The request reached the server, which bills it: its input is charged.
    assert (_line(turn).detail["inputTokens"], _line(turn).detail["outputTokens"]) == (sent, 0)
    assert [e["type"] for e in Block.objects.get(turn=turn).entries] == ["message"]


def test_a_server_that_cannot_be_reached_fails_the_turn(define, settings, studio_conf, caplog):
    settings.OPENAI_BASE_URL = "http://127.0.0.1:1/v1"
    settings.OPENAI_API_KEY = ""
    studio_conf(MODEL_MAX_RETRIES=0)
    agent = define("dm", model=MODEL)

    turn = turn_send(agent=agent, content="Anyone there?")

    assert turn.status == TurnStatus.FAILED
    assert "could not be reached" in turn.error
    assert "127.0.0.1" not in turn.error
    said = failure_logged(caplog, turn)
    assert "Could not reach the OpenAI-compatible server at http://127.0.0.1:1/v1/" in said
    assert "OPENAI_BASE_URL" in said
    assert _line(turn) is None  # never connected: nothing billed


def test_no_key_and_no_base_url_fails_clearly_without_a_call(define, settings, caplog):
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""
    agent = define("dm", model=MODEL)

    turn = turn_send(agent=agent, content="Hello")

    assert turn.status == TurnStatus.FAILED
    assert "not set up to reach the model's provider" in turn.error
    assert "OPENAI_API_KEY is not set" in failure_logged(caplog, turn)


def test_a_local_server_gets_a_placeholder_key(dm, fake_openai, settings):
    settings.OPENAI_API_KEY = ""
    fake_openai.push(completion("Hi."))

    assert turn_send(agent=dm, content="Hello").status == TurnStatus.COMPLETED
    assert fake_openai.requests[0]["headers"]["authorization"] == "Bearer no-key-needed"


@pytest.mark.parametrize(
    "answer, told, logged",
    [
        (
            error(401, "Incorrect API key provided."),
            "answered 401 (unauthorized)",
            "answered 401 (unauthorized — check OPENAI_API_KEY)",
        ),
        (
            error(404, "The model 'gpt-test' does not exist."),
            "answered 404 (not found)",
            "answered 404 (not found — check the model",
        ),
        (raw(502, "<html><body>Bad gateway</body></html>"), "answered 502 (bad gateway)", "Bad gateway"),
        (
            {"status": 200, "body": {"id": "x", "object": "chat.completion", "choices": []}},
            "could not be read",
            "no choices",
        ),
        (raw(200, "this is not JSON"), "could not be read", "could not be read as a chat completion"),
    ],
)
def test_each_failure_tells_the_game_its_kind_and_the_log_its_details(
    dm, fake_openai, studio_conf, caplog, answer, told, logged
):
    studio_conf(MODEL_MAX_RETRIES=0)
    fake_openai.push(answer)

    turn = turn_send(agent=dm, content="Hello")

    assert turn.status == TurnStatus.FAILED
    assert turn.error.startswith("The model call failed: ")
    assert told in turn.error
    assert logged in failure_logged(caplog, turn)
    assert "OPENAI" not in turn.error and "127.0.0.1" not in turn.error


# --- tool calls the engine refuses ------------------------------------------------------------


def test_invalid_tool_json_and_an_unknown_tool_come_back_as_errors(dm, fake_openai):
    broken = '{"name": "quest", "content": "unterminated'
    fake_openai.push(
        completion(tool_calls=[tool_call("close_memory", broken, id="call_bad")]),
        completion(tool_calls=[tool_call("summon_dragon", {"size": "large"}, id="call_dragon")]),
        completion("Let me try that another way."),
    )

    turn = turn_send(agent=dm, content="Write it down.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Let me try that another way.")
    bad, dragon = turn_tool_calls(turn)
    assert (bad["name"], bad["arguments"], bad["isError"]) == ("close_memory", broken, True)
    assert "were not valid JSON" in bad["result"]
    assert (dragon["name"], dragon["isError"]) == ("summon_dragon", True)
    assert "no tool named 'summon_dragon'" in dragon["result"]
    assert _line(turn, "memory_access").quantity == 1  # the unknown tool is not billed
    assert not Memory.objects.exists()
    messages = fake_openai.bodies[1]["messages"]
    assert messages[-2]["tool_calls"][0]["function"]["arguments"] == broken  # sent back as the model wrote it
    assert messages[-1]["tool_call_id"] == "call_bad"
    assert messages[-1]["content"] == "Error: " + bad["result"]
    assert fake_openai.bodies[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_dragon",
        "content": "Error: " + dragon["result"],
    }


def test_two_tool_calls_in_one_step_run_in_order(dm, fake_openai):
    fake_openai.push(
        completion(
            tool_calls=[
                tool_call("close_memory", QUEST, id="a"),
                tool_call("open_memory", {"name": "quest"}, id="b"),
            ]
        ),
        completion("Both done."),
    )

    turn = turn_send(agent=dm, content="Note it and keep it open.")

    assert [c["isError"] for c in turn_tool_calls(turn)] == [False, False]
    assert Memory.objects.get(name="quest").is_open
    messages = fake_openai.bodies[1]["messages"]
    assert [c["id"] for c in messages[-3]["tool_calls"]] == ["a", "b"]
    assert [(m["role"], m["tool_call_id"]) for m in messages[-2:]] == [("tool", "a"), ("tool", "b")]


# --- costs ------------------------------------------------------------------------------------


def test_reported_usage_becomes_the_model_cost_line(dm, fake_openai):
    fake_openai.push(
        completion(tool_calls=[tool_call("open_memory", {"name": "nope"})], usage=(1200, 300, 1000)),
        completion("Done.", usage=(1500, 50, 1200)),
    )

    turn = turn_send(agent=dm, content="Look it up.")

    price = ModelPrice.objects.get(model="*")  # no row for openai:gpt-test: the default price
    expected = _amount(price, 1200, 300, 1000) + _amount(price, 1500, 50, 1200)
    line = _line(turn)
    assert line.amount == expected
    assert line.quantity == 1200 + 300 + 1500 + 50
    assert (line.detail["inputTokens"], line.detail["outputTokens"], line.detail["cachedInputTokens"]) == (
        2700,
        350,
        2200,
    )
    lines = {line["kind"]: line for line in turn_cost(turn)["lines"]}
    assert lines["model"]["amount"] == str(expected)


def test_a_price_row_of_the_model_is_used(dm, fake_openai):
    price = ModelPrice.objects.create(
        model=MODEL,
        input_per_mtok=Decimal("3"),
        output_per_mtok=Decimal("15"),
        cached_input_per_mtok=Decimal("0.3"),
    )
    fake_openai.push(completion("Hi.", usage=(10_000, 2_000, 4_000)))

    turn = turn_send(agent=dm, content="Hello")

    # 6000 × 3 + 4000 × 0.3 + 2000 × 15 per million = 0.049200
    assert _line(turn).amount == _amount(price, 10_000, 2_000, 4_000) == Decimal("0.049200")


def test_a_server_that_reports_no_usage_is_still_charged_by_count(dm, fake_openai):
    fake_openai.push(completion("A reply of a few words.", usage=None))

    turn = turn_send(agent=dm, content="Hello")

    line = _line(turn)
    assert line.detail["outputTokens"] == count_tokens("A reply of a few words.")
    assert line.detail["inputTokens"] > 0
    assert line.amount > 0


# --- what is offered --------------------------------------------------------------------------


def test_an_empty_system_prompt_is_not_sent(define, fake_openai):
    agent = define("npc", model=MODEL, memory_enabled=False)
    fake_openai.push(completion("Hm."))

    turn_send(agent=agent, content="Hello")

    assert fake_openai.bodies[0]["messages"] == [{"role": "user", "content": "Hello"}]


# --- cancel -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_cancel_ends_a_turn_while_the_model_call_is_in_flight(dm, fake_openai):
    fake_openai.push(completion("Far too late.", delay=LATER_THAN_ANY_WAIT))
    thread, box = in_thread(turn_send, agent=dm, content="Tell me a long story.")
    wait_for(lambda: len(fake_openai.requests) == 1)

    turn_cancel(Turn.objects.get(agent=dm, status=TurnStatus.RUNNING))
    thread.join(60)

    # The send ended without the answer, which the fake still holds.
    assert not thread.is_alive()
    turn = box["result"]
    assert turn.status == TurnStatus.CANCELLED
    assert [e["type"] for e in Block.objects.get(turn=turn).entries] == ["message"]
    assert _line(turn) is None
    fake_openai.release()  # the abandoned call ends (model_calls_ended waits for it)


def _cancelled_while_called(dm, fake_openai):
    """(turn, the abandoned call's thread, ended): a send cancelled while
    its model call is in flight, once that call has ended."""
    thread, box = in_thread(turn_send, agent=dm, content="Hello?")
    wait_for(lambda: len(fake_openai.requests) == 1)
    turn_cancel(Turn.objects.get(agent=dm, status=TurnStatus.RUNNING))
    thread.join(60)
    assert CALL_THREADS.wait_quiet(60)  # the abandoned call has ended
    return box["result"]


@pytest.mark.django_db(transaction=True)
def test_what_a_cancelled_call_answers_later_is_charged_not_shown(dm, fake_openai):
    fake_openai.push(completion("Too late to count.", delay=1))

    turn = _cancelled_while_called(dm, fake_openai)

    # The abandoned call's answer streamed in and was read to its end for its usage.
    assert turn.status == TurnStatus.CANCELLED
    block = Block.objects.get(turn=turn)
    assert [e["type"] for e in block.entries] == ["message"]  # its text is not shown
    line = CostLine.objects.get(turn_id=turn.uuid, kind="model")
    assert (line.detail["inputTokens"], line.detail["outputTokens"]) == (100, 20)


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_call_is_not_retried_for_a_turn_nobody_waits_for(dm, fake_openai):
    fake_openai.push(error(500, "Failing slowly.", delay=1))
    fake_openai.always(completion("Nobody reads this."))

    turn = _cancelled_while_called(dm, fake_openai)

    assert turn.status == TurnStatus.CANCELLED
    assert len(fake_openai.requests) == 1  # refused, and not asked again
    assert not CostLine.objects.filter(turn_id=turn.uuid, kind="model").exists()  # a refusal is free


# --- compaction -------------------------------------------------------------------------------


def _play_three_turns(agent, fake):
    fake.push(
        completion(
            tool_calls=[tool_call("close_memory", QUEST), tool_call("open_memory", {"name": "quest"})]
        ),
        completion("Noted."),
        completion("The ferryman nods."),
        completion("The bells ring."),
    )
    send_each(agent, "I want the key.", "I pay the ferryman.", "What was that sound?")
    assert Memory.objects.get(agent=agent, name="quest").is_open


@pytest.mark.django_db(transaction=True)
def test_a_compaction_through_the_provider_installs_the_summary_and_rewrites(dm, fake_openai):
    _play_three_turns(dm, fake_openai)
    fake_openai.push(
        compaction_answer(
            "Mara paid the ferryman to cross.",
            {"quest": "Open the house in Ashmere.", "npcs": "never written: not open"},
            usage=(900, 60),
        )
    )

    compaction_request(agent=dm, reason=CompactionReason.MANUAL)

    done = Compaction.objects.get(agent=dm)
    assert done.status == CompactionStatus.DONE
    checkpoint = Checkpoint.objects.get(agent=dm)
    assert (checkpoint.summary, checkpoint.through_block) == ("Mara paid the ferryman to cross.", 2)
    quest = Memory.objects.get(agent=dm, name="quest")
    assert (quest.content, quest.updated_by) == ("Open the house in Ashmere.", Writer.COMPACTOR)
    assert not Memory.objects.filter(name="npcs").exists()
    body = fake_openai.bodies[-1]
    assert body["messages"][0] == {"role": "system", "content": COMPACTOR_INSTRUCTIONS}
    prompt = body["messages"][1]["content"]
    assert "### quest — What the player wants now\nFind the key." in prompt
    assert "I pay the ferryman." in prompt and "The ferryman nods." in prompt
    assert "What was that sound?" not in prompt  # the newest block stays verbatim
    assert "## Open memory budget\n\nKeep the open memories' content under 4000 tokens in all." in prompt
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "compaction", "schema": COMPACTION_SCHEMA, "strict": True},
    }
    assert "tools" not in body
    line = CostLine.objects.get(compaction_id=done.uuid)
    assert (line.kind, line.quantity) == ("compaction", 960)


@pytest.mark.django_db(transaction=True)
def test_a_server_without_json_schema_gets_json_mode(dm, fake_openai):
    _play_three_turns(dm, fake_openai)
    fenced = "```json\n" + json.dumps({"summary": "Fenced but fine.", "memories": []}) + "\n```"
    fake_openai.push(
        error(400, "response_format 'json_schema' is not supported", type="invalid_request_error"),
        completion(fenced),
    )

    compaction_request(agent=dm, reason=CompactionReason.MANUAL)

    assert Checkpoint.objects.get(agent=dm).summary == "Fenced but fine."
    assert fake_openai.bodies[-1]["response_format"] == {"type": "json_object"}
    assert fake_openai.bodies[-2]["response_format"]["type"] == "json_schema"


@pytest.mark.django_db(transaction=True)
def test_an_answer_that_is_not_json_fails_the_compaction_after_its_attempts(dm, fake_openai, studio_conf):
    _play_three_turns(dm, fake_openai)
    studio_conf(COMPACTION_MAX_ATTEMPTS=2)
    fake_openai.always(completion("Sure! Here is what happened so far: Mara paid the ferryman."))

    compaction_request(agent=dm, reason=CompactionReason.MANUAL)

    done = Compaction.objects.get(agent=dm)
    assert (done.status, done.attempts) == (CompactionStatus.FAILED, 2)
    assert "the compactor's answer is not JSON" in done.error
    assert not Checkpoint.objects.exists()
    assert not Block.objects.filter(agent=dm, folded=True).exists()
    assert Memory.objects.get(name="quest").content == "Find the key."
    # Both answers were billed by the provider: both are charged, on its one line.
    assert CostLine.objects.get(kind="compaction").detail["calls"] == 2


@pytest.mark.django_db(transaction=True)
def test_a_failed_compaction_attempt_is_queued_again(dm, fake_openai, studio_conf, caplog):
    _play_three_turns(dm, fake_openai)
    studio_conf(COMPACTION_RUNNER="none", MODEL_MAX_RETRIES=0)
    fake_openai.push(error(503, "Overloaded, try later."))
    pending = compaction_request(agent=dm, reason=CompactionReason.MANUAL)

    with pytest.raises(CompactionRetry):
        compaction_run(str(pending.uuid))

    pending.refresh_from_db()
    assert (pending.status, pending.attempts) == (CompactionStatus.QUEUED, 1)
    assert "answered 503 (unavailable)" in pending.error
    assert "Overloaded" not in pending.error
    assert "answered 503 (unavailable): Overloaded, try later." in caplog.text
    assert not Checkpoint.objects.exists()
    assert not CostLine.objects.filter(kind="compaction").exists()  # refused: not billed


def test_a_cut_off_compaction_answer_says_so(fake_openai, settings):
    from agents.providers.base import CompactionRequest, ProviderError

    fake_openai.push(completion('{"summary": "Mara paid', finish_reason="length"))
    request = CompactionRequest(
        system=SYSTEM,
        previous_summary=None,
        messages=[{"role": "user", "content": "hello"}],
        open_memories=[{**QUEST, "version": 1}],
    )

    with pytest.raises(ProviderError, match="cut off"):
        OpenAIProvider("gpt-test").summarize(request)
    # Room for a summary and a rewrite of the open memory, beyond a model step's cap.
    asked = fake_openai.bodies[0]["max_completion_tokens"]
    assert asked > settings.STUDIO["MODEL_MAX_OUTPUT_TOKENS"]
    assert asked >= settings.STUDIO.get("COMPACTION_MAX_OUTPUT_TOKENS", 0)
