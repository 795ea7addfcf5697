"""The Anthropic provider, through the engine and the official SDK against a
fake Messages API on loopback: what it sends (system, cached context block,
alternating roles, tools, tool_use / tool_result pairs), retries, failures
and timeouts, bad tool input, usage and cost, the compactor's forced tool
call, transient sends and cancel."""

from decimal import Decimal

import pytest

from agents.compaction import CompactionRetry, compaction_request, compaction_run
from agents.models import Block, Checkpoint, Compaction, CompactionReason, CompactionStatus, Turn, TurnStatus
from agents.providers.prompts import COMPACTION_SCHEMA, COMPACTOR_INSTRUCTIONS, TOOL_SPECS
from agents.sending.turn_slot import turn_cancel
from billing.models import CostLine, ModelPrice
from memories.models import Memory, Writer
from memories.tools import MEMORY_TOOLS
from tests.support.fake_anthropic import error, message, text, tool_use
from tests.support.sending import turn_send

from ..conftest import call, in_thread, quest_checkpoint, script, wait_for
from .conftest import LATER_THAN_ANY_WAIT, TOOL_CALL_THEN_REPLY, entry_kinds, failure_logged, send_each

MODEL = "anthropic:claude-test"
QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the key."}


@pytest.fixture
def dm(define):
    return define("dm", model=MODEL, system_prompt="You are the dungeon master.")


def checkpoint_for(agent, *, through=0):
    return quest_checkpoint(agent, through=through)


def roles(body):
    return [m["role"] for m in body["messages"]]


def assert_alternates_from_user(body):
    sequence = roles(body)
    assert sequence[0] == "user"
    assert all(a != b for a, b in zip(sequence, sequence[1:], strict=False)), sequence
    assert sequence[-1] == "user"


def block_types(body):
    return [block["type"] for m in body["messages"] for block in m["content"]]


def model_line(turn):
    return CostLine.objects.get(turn_id=turn.uuid, kind="model")


# --- (a) a tool call, then text ---------------------------------------------------------


def test_a_tool_call_then_text_through_the_messages_api(dm, fake, settings):
    checkpoint = checkpoint_for(dm)
    fake.push(
        message(tool_use("close_memory", QUEST, id="toolu_quest")),
        message(text("Noted. The door creaks open.")),
    )

    turn = turn_send(agent=dm, content="I open the chapel door.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Noted. The door creaks open."), turn.error
    assert Memory.objects.get(agent=dm, name="quest").content == "Find the key."
    assert entry_kinds(turn) == TOOL_CALL_THEN_REPLY
    entries = Block.objects.get(turn=turn).entries
    assert (entries[1]["id"], entries[1]["arguments"], entries[1]["isError"]) == ("toolu_quest", QUEST, False)

    first, second = fake.requests
    assert first.path == "/v1/messages"
    assert "test-key" in (first.headers.get("x-api-key") or first.headers.get("authorization") or "")
    assert "anthropic-version" in first.headers
    body = first.body
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == settings.STUDIO["MODEL_MAX_OUTPUT_TOKENS"]
    assert body["system"] == "You are the dungeon master."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": checkpoint.context_block, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "I open the chapel door."},
            ],
        }
    ]
    assert [t["name"] for t in body["tools"]] == list(MEMORY_TOOLS)
    for tool in body["tools"]:
        assert tool["input_schema"] == TOOL_SPECS[tool["name"]]["parameters"]
        assert tool["description"] == TOOL_SPECS[tool["name"]]["description"]
    assert "tool_choice" not in body

    body = second.body
    assert_alternates_from_user(body)
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_quest", "name": "close_memory", "input": QUEST}],
    }
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_quest",
                "content": entries[1]["result"],
                "is_error": False,
            }
        ],
    }
    assert model_line(turn).detail["calls"] == 2


def test_the_history_alternates_roles_and_pairs_every_tool_use_with_its_result(dm, fake):
    fake.push(
        message(text("Let me note that."), tool_use("close_memory", QUEST, id="toolu_a")),
        message(
            tool_use("open_memory", {"name": "quest"}, id="toolu_b"),
            tool_use("open_memory", {"name": "nope"}),
        ),
        message(text("Onward.")),
        message(text("The bells ring.")),
    )
    turn_send(agent=dm, content="I want the key.")

    turn_send(agent=dm, content="What now?")

    body = fake.bodies[-1]
    assert_alternates_from_user(body)
    messages = body["messages"]
    assert [b["type"] for b in messages[1]["content"]] == ["text", "tool_use"]
    assert messages[1]["content"][0]["text"] == "Let me note that."
    # Both calls of one step, then both results in one user message.
    assert [b["type"] for b in messages[3]["content"]] == ["tool_use", "tool_use"]
    assert [b["type"] for b in messages[4]["content"]] == ["tool_result", "tool_result"]
    assert [b["is_error"] for b in messages[4]["content"]] == [False, True]
    # The final reply, then the next send's message.
    assert messages[5] == {"role": "assistant", "content": [{"type": "text", "text": "Onward."}]}
    assert messages[6] == {"role": "user", "content": [{"type": "text", "text": "What now?"}]}
    for use_message, result_message in [(messages[1], messages[2]), (messages[3], messages[4])]:
        use_ids = [b["id"] for b in use_message["content"] if b["type"] == "tool_use"]
        assert [b["tool_use_id"] for b in result_message["content"]] == use_ids


def test_tool_ids_reused_by_an_earlier_model_are_made_unique(define, fake):
    # The scripted model numbers its calls call_1, call_2… in every turn.
    agent = define("dm", system_prompt="You are the dungeon master.")
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), {"say": "ok"}))
    turn_send(agent=agent, content=script(call("open_memory", name="quest"), {"say": "ok"}))
    agent = define("dm", model=MODEL, system_prompt="You are the dungeon master.")
    fake.push(message(text("I remember.")))

    assert turn_send(agent=agent, content="Remember?").status == TurnStatus.COMPLETED

    body = fake.bodies[-1]
    assert_alternates_from_user(body)
    uses = [b["id"] for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in body["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert len(uses) == 2 and len(set(uses)) == 2
    assert results == uses


# --- (b) retried errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type"), [(429, "rate_limit_error"), (529, "overloaded_error"), (503, "api_error")]
)
def test_a_retryable_error_is_retried_and_the_turn_completes(dm, fake, status, error_type):
    fake.push(error(status, error_type, "Try again."), message(text("Here I am.")))

    turn = turn_send(agent=dm, content="Hello?")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Here I am.")
    assert len(fake.requests) == 2
    assert fake.requests[1].headers["x-stainless-retry-count"] == "1"
    assert model_line(turn).detail["calls"] == 1


def test_a_retry_waits_what_the_server_asks_or_backs_off_on_its_own(dm, fake, backoff):
    fake.push(
        error(429, "rate_limit_error", "Slow down.", retry_after_ms=None),
        error(529, "overloaded_error", "Busy.", retry_after_ms=250),
        message(text("ok")),
    )

    turn = turn_send(agent=dm, content="Hello?")

    assert turn.status == TurnStatus.COMPLETED
    assert [r.headers["x-stainless-retry-count"] for r in fake.requests] == ["0", "1", "2"]
    first, second = backoff
    assert 0.375 <= first <= 0.5  # the SDKs' first backoff, less up to a quarter at random
    assert second == 0.25  # what the server asked for


# --- (c) failing every time --------------------------------------------------------------


def test_a_server_error_every_time_fails_the_turn_and_keeps_what_was_done(dm, fake, caplog):
    fake.push(message(tool_use("close_memory", QUEST)))
    fake.always(error(500, "api_error", "Internal server error"))

    turn = turn_send(agent=dm, content="I want the key.")

    assert turn.status == TurnStatus.FAILED
    assert "answered 500 (server error)" in turn.error
    assert "Anthropic answered 500 (server error) after 2 retries: Internal server error" in failure_logged(
        caplog, turn
    )
    assert len(fake.requests) == 1 + 3
    assert Memory.objects.get(agent=dm, name="quest").content == "Find the key."
    block = Block.objects.get(turn=turn)
    assert block.status == TurnStatus.FAILED
    assert [e["type"] for e in block.entries] == ["message", "tool_call"]
    line = model_line(turn)  # only the call that answered
    assert (line.detail["calls"], line.detail["inputTokens"], line.detail["outputTokens"]) == (1, 100, 20)
    assert CostLine.objects.get(turn_id=turn.uuid, kind="memory_access").quantity == 1
    # The agent works again once the provider does.
    fake.always(None)
    fake.push(message(text("Back.")))
    assert turn_send(agent=dm, content="Still there?").status == TurnStatus.COMPLETED


@pytest.mark.parametrize(
    ("status", "error_type", "says"),
    [
        (401, "authentication_error", "Check ANTHROPIC_API_KEY"),
        (404, "not_found_error", "Check the agent's model ('anthropic:claude-test')"),
        (400, "invalid_request_error", "Anthropic answered 400 (bad request)"),
    ],
)
def test_a_client_error_is_not_retried_and_logs_what_to_do(dm, fake, caplog, status, error_type, says):
    fake.push(error(status, error_type, "prompt is too long" if status == 400 else "Refused."))

    turn = turn_send(agent=dm, content="Hello?")

    assert turn.status == TurnStatus.FAILED
    assert f"the model provider answered {status}" in turn.error
    said = failure_logged(caplog, turn)
    assert f"Anthropic answered {status}" in said
    assert says in said and says not in turn.error
    assert "retr" not in said
    assert len(fake.requests) == 1
    assert not CostLine.objects.filter(turn_id=turn.uuid, kind="model").exists()


def test_no_key_and_no_base_url_fails_naming_the_setting_in_the_log(dm, fake, settings, caplog):
    settings.ANTHROPIC_API_KEY = ""
    settings.ANTHROPIC_BASE_URL = ""

    turn = turn_send(agent=dm, content="Hello?")

    assert turn.status == TurnStatus.FAILED
    assert "ANTHROPIC_API_KEY is not set" in failure_logged(caplog, turn)
    assert "ANTHROPIC" not in turn.error
    assert not fake.requests


def test_a_compatible_server_needs_no_key(dm, fake, settings):
    settings.ANTHROPIC_API_KEY = ""
    fake.push(message(text("hi")))

    assert turn_send(agent=dm, content="Hello?").status == TurnStatus.COMPLETED


# --- (d) a timeout ------------------------------------------------------------------------


def test_a_slow_answer_times_out(dm, fake, studio_conf, caplog):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, MODEL_MAX_RETRIES=0)
    # An answer far later than the test would wait (it ends when the fake stops).
    fake.push(message(text("Too late."), delay=LATER_THAN_ANY_WAIT))

    turn = turn_send(agent=dm, content="Hello?")

    assert turn.status == TurnStatus.FAILED
    assert "did not answer in time" in turn.error
    said = failure_logged(caplog, turn)
    assert "timed out after 0.5 s" in said and "STUDIO_MODEL_TIMEOUT_SECONDS" in said
    assert [e["type"] for e in Block.objects.get(turn=turn).entries] == ["message"]
    # The request reached the server, which bills it: its input is charged.
    assert model_line(turn).detail["inputTokens"] > 0


def test_a_timeout_is_retried(dm, fake, studio_conf):
    # A timeout far past what the second answer takes on a loaded machine.
    studio_conf(MODEL_TIMEOUT_SECONDS=3, MODEL_MAX_RETRIES=1)
    fake.push(message(text("Too late."), delay=LATER_THAN_ANY_WAIT), message(text("In time.")))

    turn = turn_send(agent=dm, content="Hello?")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "In time.")


# --- (e) tool input the tools refuse ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "tool_input", "sent_back", "says"),
    [
        ("open_memory", "quest", {"_raw": "quest"}, "takes an object of arguments"),
        ("open_memory", ["quest"], {"_raw": ["quest"]}, "takes an object of arguments"),
        ("close_memory", {"description": "Now", "content": "x"}, None, "close_memory needs 'name'"),
        ("open_memory", {"name": 5}, None, "'name' must be a string"),
    ],
)
def test_tool_input_the_tool_refuses_is_an_error_result_billed_as_an_access(
    dm, fake, name, tool_input, sent_back, says
):
    fake.push(message(tool_use(name, tool_input, id="toolu_bad")), message(text("Let me try that again.")))

    turn = turn_send(agent=dm, content="Open the quest.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Let me try that again.")
    entry = Block.objects.get(turn=turn).entries[1]
    assert (entry["type"], entry["name"], entry["arguments"], entry["isError"]) == (
        "tool_call",
        name,
        tool_input,
        True,
    )
    assert says in entry["result"]
    assert CostLine.objects.get(turn_id=turn.uuid, kind="memory_access").quantity == 1
    messages = fake.bodies[1]["messages"]
    assert messages[1]["content"][0]["input"] == (sent_back or tool_input)
    assert messages[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_bad",
        "content": entry["result"],
        "is_error": True,
    }


def test_an_unknown_tool_is_an_error_result_and_not_billed(dm, fake):
    fake.push(message(tool_use("cast_spell", {"spell": "light"})), message(text("No magic here.")))

    turn = turn_send(agent=dm, content="Cast light.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "No magic here.")
    entry = Block.objects.get(turn=turn).entries[1]
    assert (entry["name"], entry["isError"]) == ("cast_spell", True)
    assert "no tool named 'cast_spell'" in entry["result"]
    assert not CostLine.objects.filter(turn_id=turn.uuid, kind="memory_access").exists()
    assert fake.bodies[1]["messages"][2]["content"][0]["is_error"] is True


# --- (f) usage and cost -----------------------------------------------------------------


USAGE = {
    "input_tokens": 1000,
    "output_tokens": 200,
    "cache_read_input_tokens": 3000,
    "cache_creation_input_tokens": 500,
}


def test_usage_is_charged_at_the_default_price_with_cache_reads_at_the_cached_rate(dm, fake):
    fake.push(message(text("hi"), usage=USAGE))

    turn = turn_send(agent=dm, content="Hello?")

    line = model_line(turn)
    # The "*" price: 2.5 input, 10 output, 1.25 cached input per million tokens.
    # Input is 1000 uncached + 500 cache writes (at the input rate) + 3000 cache reads.
    expected = (Decimal(1500) * Decimal("2.5") + Decimal(3000) * Decimal("1.25") + Decimal(200) * 10) / 10**6
    assert line.amount == expected == Decimal("0.009500")
    assert line.quantity == 4500 + 200
    assert (line.detail["inputTokens"], line.detail["cachedInputTokens"], line.detail["outputTokens"]) == (
        4500,
        3000,
        200,
    )


def test_usage_is_charged_at_the_models_own_price(dm, fake):
    ModelPrice.objects.create(
        model=MODEL,
        input_per_mtok=Decimal("3"),
        output_per_mtok=Decimal("15"),
        cached_input_per_mtok=Decimal("0.3"),
    )
    fake.push(
        message(tool_use("open_memory", {"name": "quest"}), usage=USAGE), message(text("hi"), usage=USAGE)
    )

    turn = turn_send(agent=dm, content="Hello?")

    per_call = (Decimal(1500) * 3 + Decimal(3000) * Decimal("0.3") + Decimal(200) * 15) / 10**6
    assert model_line(turn).amount == 2 * per_call == Decimal("0.016800")
    assert model_line(turn).detail["calls"] == 2


# --- (g) the compactor ------------------------------------------------------------------


def history_with_an_open_memory(agent, fake):
    fake.push(
        message(tool_use("close_memory", QUEST)),
        message(tool_use("open_memory", {"name": "quest"})),
        message(text("Noted.")),
        message(text("The bells ring.")),
        message(text("The ferryman waits.")),
    )
    send_each(agent, "I want the silver key, not any key.", "I listen.", "I walk to the river.")
    assert Memory.objects.get(agent=agent, name="quest").is_open


@pytest.mark.django_db(transaction=True)
def test_a_compaction_is_one_forced_write_checkpoint_call(dm, fake):
    history_with_an_open_memory(dm, fake)
    answer = {
        "summary": "Mara wants the silver key and went to the river.",
        "memories": [
            {"name": "quest", "content": "Find the silver key."},
            {"name": "ghost", "content": "never written: it is not open"},
        ],
    }
    fake.push(
        message(tool_use("write_checkpoint", answer), usage={"input_tokens": 2000, "output_tokens": 100})
    )

    compaction = compaction_request(agent=dm, reason=CompactionReason.MANUAL)

    compaction.refresh_from_db()
    assert compaction.status == CompactionStatus.DONE
    checkpoint = Checkpoint.objects.get(agent=dm)
    assert (checkpoint.summary, checkpoint.through_block) == (answer["summary"], 2)
    quest = Memory.objects.get(agent=dm, name="quest")
    assert (quest.content, quest.updated_by) == ("Find the silver key.", Writer.COMPACTOR)
    assert not Memory.objects.filter(agent=dm, name="ghost").exists()
    assert "Find the silver key." in checkpoint.context_block

    body = fake.bodies[-1]
    assert body["model"] == "claude-test"
    assert body["tool_choice"] == {"type": "tool", "name": "write_checkpoint"}
    assert [(t["name"], t["input_schema"]) for t in body["tools"]] == [
        ("write_checkpoint", COMPACTION_SCHEMA)
    ]
    assert body["system"].startswith(COMPACTOR_INSTRUCTIONS)
    assert "write_checkpoint" in body["system"]
    assert roles(body) == ["user"]
    prompt = body["messages"][0]["content"][0]["text"]
    assert "### quest — What the player wants now\nFind the key." in prompt
    assert "I want the silver key, not any key." in prompt
    assert "I walk to the river." not in prompt  # the newest block is kept
    assert "## Open memory budget\n\nKeep the open memories' content under 4000 tokens in all." in prompt
    line = CostLine.objects.get(compaction_id=compaction.uuid, kind="compaction")
    assert line.amount == (Decimal(2000) * Decimal("2.5") + Decimal(100) * 10) / 10**6

    # The next send sees the new block, cached.
    fake.push(message(text("Onward.")))
    turn_send(agent=dm, content="Next?")
    first = fake.bodies[-1]["messages"][0]["content"][0]
    assert (first["text"], first["cache_control"]) == (checkpoint.context_block, {"type": "ephemeral"})


@pytest.mark.django_db(transaction=True)
def test_a_compactor_answer_without_the_tool_call_is_retried_later(dm, fake, studio_conf):
    history_with_an_open_memory(dm, fake)
    studio_conf(COMPACTION_RUNNER="none")  # queue it, run one attempt by hand
    pending = compaction_request(agent=dm, reason=CompactionReason.MANUAL)
    fake.push(message(text("Here is the summary: Mara went to the river."), stop_reason="end_turn"))

    with pytest.raises(CompactionRetry):
        compaction_run(str(pending.uuid))

    pending.refresh_from_db()
    assert (pending.status, pending.attempts) == (CompactionStatus.QUEUED, 1)
    assert "without calling write_checkpoint" in pending.error
    assert "Mara went to the river" in pending.error
    assert not Checkpoint.objects.exists()
    assert Memory.objects.get(agent=dm, name="quest").content == "Find the key."
    assert not Block.objects.filter(agent=dm, folded=True).exists()
    # The provider billed the answer: it is charged, though nothing came of it.
    line = CostLine.objects.get(kind="compaction")
    assert (line.compaction_id, line.detail["calls"]) == (pending.uuid, 1)


@pytest.mark.django_db(transaction=True)
def test_a_compactor_answer_with_invalid_input_fails_after_its_attempts(dm, fake, studio_conf):
    history_with_an_open_memory(dm, fake)
    studio_conf(COMPACTION_MAX_ATTEMPTS=2)
    fake.always(message(tool_use("write_checkpoint", {"memories": [{"name": "quest"}]})))

    compaction_request(agent=dm, reason=CompactionReason.MANUAL)

    done = Compaction.objects.get(agent=dm)
    assert (done.status, done.attempts) == (CompactionStatus.FAILED, 2)
    assert "'summary'" in done.error
    assert not Checkpoint.objects.exists()
    assert Memory.objects.get(agent=dm, name="quest").content == "Find the key."


def test_a_compactor_answer_cut_off_at_its_limit_is_an_error(dm, fake, studio_conf):
    history_with_an_open_memory(dm, fake)
    studio_conf(COMPACTION_RUNNER="none")
    pending = compaction_request(agent=dm, reason=CompactionReason.MANUAL)
    fake.push(message(tool_use("write_checkpoint", {"summary": "Mara"}), stop_reason="max_tokens"))

    with pytest.raises(CompactionRetry):
        compaction_run(str(pending.uuid))

    pending.refresh_from_db()
    assert "cut off" in pending.error
    assert fake.bodies[-1]["max_tokens"] >= 8192


# --- (h) a transient send ----------------------------------------------------------------


def test_a_transient_send_offers_no_tools_and_shows_earlier_calls_as_text(dm, fake):
    fake.push(message(tool_use("close_memory", QUEST)), message(text("Noted.")))
    turn_send(agent=dm, content="I want the key.")
    fake.push(message(text("You want the key.")))

    turn = turn_send(agent=dm, content="What do I want?", transient=True)

    assert (turn.status, turn.block_number, turn.reply) == (TurnStatus.COMPLETED, None, "You want the key.")
    body = fake.bodies[-1]
    assert "tools" not in body
    assert "tool_choice" not in body
    # The API refuses tool_use / tool_result blocks in a request without tools.
    assert set(block_types(body)) == {"text"}
    assert_alternates_from_user(body)
    flat = "\n".join(b["text"] for m in body["messages"] for b in m["content"])
    assert "[called close_memory(" in flat
    assert "[close_memory result]" in flat
    assert Block.objects.filter(agent=dm).count() == 1


# --- (i) cancel -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_cancel_ends_the_turn_while_the_model_call_runs(dm, fake, studio_conf):
    studio_conf(MODEL_TIMEOUT_SECONDS=20)
    fake.push(message(tool_use("close_memory", QUEST)), message(text("never"), delay=LATER_THAN_ANY_WAIT))
    thread, box = in_thread(turn_send, agent=dm, content="I want the key.")
    wait_for(lambda: len(fake.requests) == 2)
    running = Turn.objects.get(agent=dm, status=TurnStatus.RUNNING)

    turn_cancel(running)
    thread.join(60)

    # The send ended without the answer, which the fake still holds.
    assert not thread.is_alive()
    turn = box["result"]
    assert turn.status == TurnStatus.CANCELLED
    block = Block.objects.get(turn=turn)
    assert block.status == TurnStatus.CANCELLED
    assert [e["type"] for e in block.entries] == ["message", "tool_call"]
    assert Memory.objects.get(agent=dm, name="quest").content == "Find the key."
    assert model_line(turn).detail["calls"] == 1
    fake.release()  # the abandoned call ends (model_calls_ended waits for it)


# --- replies that are not plain --------------------------------------------------------


def test_an_empty_answer_after_a_tool_call_completes_with_no_reply(dm, fake):
    fake.push(message(tool_use("close_memory", QUEST)), message())
    turn_send(agent=dm, content="Note it.")
    fake.push(message(text("ok")))

    turn = turn_send(agent=dm, content="And now?")

    assert turn.status == TurnStatus.COMPLETED
    # The empty answer left nothing the API would refuse (no empty text blocks).
    body = fake.bodies[-1]
    assert all(b.get("text", "x").strip() for m in body["messages"] for b in m["content"])
    assert_alternates_from_user(body)


def test_an_answer_cut_off_at_the_output_limit_keeps_its_text(dm, fake):
    fake.push(message(text("The chapel is dark and"), stop_reason="max_tokens"))

    turn = turn_send(agent=dm, content="Describe the chapel.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "The chapel is dark and")


def test_a_tool_call_cut_off_at_the_output_limit_fails_saying_what_to_raise(dm, fake, caplog):
    fake.push(message(tool_use("close_memory", {"name": "quest"}), stop_reason="max_tokens"))

    turn = turn_send(agent=dm, content="Note it.")

    assert turn.status == TurnStatus.FAILED
    assert "output limit in the middle of a close_memory call" in turn.error
    assert "STUDIO_MODEL_MAX_OUTPUT_TOKENS" in failure_logged(caplog, turn)
    assert not Memory.objects.exists()
