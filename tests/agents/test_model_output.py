"""What a model returns is untrusted: in a game, anonymous players steer it.
However many tool calls it asks for, however large their arguments and
results, a turn runs a bounded number of them, writes each once, carries
bounded copies in its events and answers, charges every fee within what the
game can pay — and, when it must stop, still gets the player a reply. Each
through the official SDK against the loopback OpenAI-compatible fake."""

import json
import threading
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from agents.compaction import CompactionFailed, CompactionRetry, compaction_request, compaction_run
from agents.models import (
    Block,
    Checkpoint,
    Compaction,
    CompactionReason,
    CompactionStatus,
    Turn,
    TurnEntry,
    TurnStatus,
)
from agents.wire import turn_wire
from billing import ledger
from billing.models import Account, Adjustment, CostLine
from memories.models import Memory, MemoryEvent
from memories.tools import tool_run
from studio.live.events import agent_events_buffer
from studio.tokens import count_tokens
from tests.support.fake_openai import (  # noqa: F401 — the fixture
    compaction_answer,
    completion,
    fake_openai_fixture,
    raw,
    tool_call,
)
from tests.support.sending import turn_send

MODEL = "openai:gpt-test"


@pytest.fixture(autouse=True)
def unpriced(studio_conf):
    studio_conf(ALLOW_UNPRICED_MODELS=True)


@pytest.fixture
def dm(define, fake_openai):
    return define("dm", model=MODEL, max_tokens=32000, max_open_tokens=12000)


def calls(n: int, name: str = "open_memory", arguments: dict | None = None) -> dict:
    """One answer asking for `n` tool calls."""
    return completion(tool_calls=[tool_call(name, arguments or {"name": "quest"}) for _ in range(n)])


def memory_make(agent, *, name="quest", content="Find the key.", is_open=False) -> None:
    with transaction.atomic():
        tool_run(
            agent=agent, name="close_memory", arguments={"name": name, "description": "d", "content": content}
        )
    if is_open:
        with transaction.atomic():
            tool_run(agent=agent, name="open_memory", arguments={"name": name})


def tool_entries(turn) -> list[dict]:
    return [e for e in Block.objects.get(turn=turn).entries if e["type"] == "tool_call"]


def fees(turn) -> int:
    return (
        CostLine.objects.filter(turn_id=turn.uuid, kind="memory_access").aggregate(n=Sum("quantity"))["n"]
        or 0
    )


def set_balance(game, amount) -> None:
    amount = ledger.credits(amount)
    Account.objects.filter(game=game).update(balance=amount)
    Adjustment.objects.filter(game=game).update(amount=amount)  # the ledger stays true


def ledger_ok() -> bool:
    return all(check.is_consistent for check in ledger.ledger_check())


# --- tool calls per step and per turn ----------------------------------------------------------


def test_a_step_runs_at_most_its_bound_of_tool_calls_and_tells_the_model_of_the_rest(dm, fake_openai):
    memory_make(dm, is_open=True)
    fake_openai.push(calls(40), completion("Done."))

    turn = turn_send(agent=dm, content="Open it. Again. Again.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Done.")
    recorded = tool_entries(turn)
    assert len(recorded) == 17
    assert not any(e["isError"] for e in recorded[:16])
    assert recorded[16]["isError"] and recorded[16]["result"].startswith("Not run")
    assert "asked for 40 tool calls" in recorded[16]["result"]
    # Every call recorded is charged, the one that says what was not run among them.
    assert fees(turn) == 17
    answered = [m for m in fake_openai.bodies[1]["messages"] if m["role"] == "tool"]
    assert len(answered) == 17


def test_a_turn_past_its_bound_of_tool_calls_is_asked_once_more_with_no_tools(dm, fake_openai, studio_conf):
    studio_conf(MAX_TOOL_CALLS_PER_STEP=3, MAX_TOOL_CALLS_PER_TURN=5)
    memory_make(dm, is_open=True)
    fake_openai.push(calls(3), calls(3), completion("That is all I can do now."))

    turn = turn_send(agent=dm, content="Keep opening it.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "That is all I can do now.")
    wire = turn_wire(turn)
    assert wire["cutShort"]["code"] == "too_many_tool_calls"
    recorded = tool_entries(turn)
    assert len(recorded) == 6 and recorded[5]["result"].startswith("Not run")
    last = fake_openai.bodies[2]
    assert "tools" not in last
    assert "No more tool calls" in last["messages"][0]["content"]
    assert CostLine.objects.get(turn_id=turn.uuid, kind="model").detail["calls"] == 3


def test_a_model_that_calls_tools_even_when_offered_none_gets_no_reply_and_the_turn_says_why(
    dm, fake_openai, studio_conf
):
    studio_conf(MAX_MODEL_STEPS=2)
    memory_make(dm, is_open=True)
    fake_openai.always(calls(1))

    turn = turn_send(agent=dm, content="Loop.")

    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "too_many_steps")
    assert "gave no reply" in turn.error
    assert len(tool_entries(turn)) == 2  # the calls of the last call, not offered, were not run
    assert len(fake_openai.requests) == 3


# --- writes, events and answers in proportion ---------------------------------------------------


def test_recording_a_turns_tool_calls_writes_each_call_once(dm, fake_openai):
    content = "the ferryman's toll is a silver coin " * 500  # ~18 KB of arguments a call
    fake_openai.push(
        completion(
            tool_calls=[
                tool_call("close_memory", {"name": f"note{n}", "description": "d", "content": content})
                for n in range(16)
            ]
        ),
        completion("Noted."),
    )

    with CaptureQueriesContext(connection) as captured:
        turn = turn_send(agent=dm, content="Write it all down.")

    assert turn.status == TurnStatus.COMPLETED
    entries = json.dumps(Block.objects.get(turn=turn).entries)
    writes = [
        q["sql"]
        for q in captured.captured_queries
        if "agents_block" in q["sql"] or "agents_turnentry" in q["sql"]
    ]
    # Each call once as it is recorded, and the block whole once at the end:
    # rewriting the block on every call would write it 8 times over.
    assert sum(len(sql) for sql in writes) < 3 * len(entries)
    assert not TurnEntry.objects.exists()


def test_a_tool_calls_name_and_id_are_kept_bounded_however_long_the_model_makes_them(
    dm, fake_openai, event_buffers_cleared
):
    long = "x" * 200_000
    fake_openai.push(
        completion(tool_calls=[tool_call(long, {}, id="i" * 200_000) for _ in range(3)]), completion("Done.")
    )

    turn = turn_send(agent=dm, content="Call whatever you like.")

    assert turn.status == TurnStatus.COMPLETED
    recorded = tool_entries(turn)
    assert len(recorded) == 3
    for entry in recorded:
        assert entry["isError"] and entry["name"] == "x" * 127 + "…"
        assert len(entry["id"]) <= 64 and len(entry["result"]) < 300
    assert len(json.dumps(Block.objects.get(turn=turn).entries)) < 5_000
    assert len(json.dumps(turn_wire(turn))) < 5_000
    assert len(json.dumps(agent_events_buffer(dm.pk)[1])) < 10_000


def test_calls_the_model_gives_one_id_get_an_id_each_so_the_next_request_pairs_them(dm, fake_openai):
    # Some OpenAI-compatible servers number calls per answer ("call_0"), and
    # a steered model can repeat an id: a provider that refuses a request
    # pairing two results with one call would refuse this agent's every send.
    memory_make(dm, name="quest")
    memory_make(dm, name="npcs")
    fake_openai.push(
        completion(
            tool_calls=[
                tool_call("open_memory", {"name": "quest"}, id="call_0"),
                tool_call("open_memory", {"name": "npcs"}, id="call_0"),
                tool_call("open_memory", {"name": "nowhere"}, id="call_0"),
            ]
        ),
        completion(tool_calls=[tool_call("close_memory", {"name": "quest"}, id="call_0")]),
        completion("Done."),
    )

    turn = turn_send(agent=dm, content="Look it all up.")

    assert turn.status == TurnStatus.COMPLETED
    ids = [e["id"] for e in tool_entries(turn)]
    assert len(set(ids)) == 4 and ids[0] == "call_0"
    last = fake_openai.bodies[2]["messages"]
    asked = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert asked == answered == ids
    results = [m["content"] for m in last if m["role"] == "tool"]
    assert "already open" not in results[0] and "'quest'" in results[0]
    assert "no memory named 'nowhere'" in results[2]
    assert results[3] == "Closed memory 'quest' (nothing in it changed)."


def test_a_call_id_the_database_cannot_store_is_replaced_and_the_turn_goes_on(dm, fake_openai):
    memory_make(dm, name="quest")
    fake_openai.push(
        completion(tool_calls=[tool_call("open_memory", {"name": "quest"}, id="call\u0000x")]),
        completion("Done."),
    )

    turn = turn_send(agent=dm, content="Look it up.")

    assert turn.status == TurnStatus.COMPLETED, turn.error
    [entry] = tool_entries(turn)
    assert "\x00" not in entry["id"] and not entry["isError"]


def test_opening_an_open_memory_again_and_again_does_not_copy_its_content(dm, fake_openai):
    big = "Mara's sister lives in Ashmere, past the drowned chapel. " * 600  # ~34 KB
    memory_make(dm, content=big, is_open=True)
    fake_openai.push(calls(16), completion("I know."))

    turn = turn_send(agent=dm, content="What do you know?")

    recorded = tool_entries(turn)
    assert all("already open" in e["result"] for e in recorded)
    assert len(json.dumps(Block.objects.get(turn=turn).entries)) < len(big) // 4
    assert len(json.dumps(turn_wire(turn))) < len(big) // 4


def test_events_and_answers_carry_long_texts_cut_and_say_where_they_are_whole(dm, fake_openai, studio_conf):
    studio_conf(SHOWN_TEXT_MAX_CHARS=1000)
    long = "The bells of Ashmere ring at dusk. " * 200  # 7,000 characters
    memory_make(dm, content=long)
    fake_openai.push(
        calls(1, "open_memory", {"name": "quest"}),
        calls(1, "close_memory", {"name": "quest", "content": long + " And at dawn."}),
        completion("Done."),
    )

    turn = turn_send(agent=dm, content="Read it, then add to it.")

    opened, closed = turn_wire(turn)["toolCalls"]
    assert len(opened["result"]) <= 1001 and opened["cut"]["block"] == turn.block_number
    assert opened["cut"]["result"] > 7000
    assert len(closed["arguments"]["content"]) <= 1001
    assert closed["cut"]["arguments"] > 7000 and "result" not in closed["cut"]
    whole = tool_entries(turn)
    assert whole[0]["result"].endswith(long) and whole[1]["arguments"]["content"].endswith("And at dawn.")


# --- fees within what the game can pay ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the watcher reads what each step commits
def test_hundreds_of_memory_calls_never_take_the_balance_below_zero(define, game, fake_openai):
    agent = define("cheap", model=MODEL, max_tokens=3000, max_open_tokens=1000)
    memory_make(agent, is_open=True)
    set_balance(game, "0.050000")
    fake_openai.answer_for = lambda body: calls(300) if body.get("tools") else completion("I must rest.")
    lowest = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            lowest.append(Account.objects.filter(game=game).values_list("balance", flat=True).first())
        connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        turn = turn_send(agent=agent, content="Open it three hundred times.")
    finally:
        done.set()
        watcher.join(10)

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "I must rest.")
    assert turn.cut_short_code == "budget_exhausted"
    assert min(lowest) >= 0
    account = Account.objects.get(game=game)
    assert account.balance >= 0 and account.held == 0
    assert ledger_ok()


@pytest.mark.django_db(transaction=True)
def test_ten_agents_making_hundreds_of_calls_at_once_never_overdraw(define, game, fake_openai):
    agents = [define(f"npc{n}", model=MODEL, max_tokens=3000, max_open_tokens=1000) for n in range(10)]
    for agent in agents:
        memory_make(agent, is_open=True)
    set_balance(game, "0.400000")
    fake_openai.answer_for = lambda body: calls(300) if body.get("tools") else completion("I must rest.")
    barrier = threading.Barrier(len(agents))
    outcomes = []

    def play(agent):
        try:
            barrier.wait()
            outcomes.append(turn_send(agent=agent, content="Open it again and again.").status)
        except Exception as error:  # a refusal before the turn ran (402, 429) is a correct outcome
            outcomes.append(getattr(error, "code", type(error).__name__))
        finally:
            connection.close()

    threads = [threading.Thread(target=play, args=(agent,)) for agent in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert len(outcomes) == 10 and set(outcomes) <= {
        TurnStatus.COMPLETED,
        TurnStatus.FAILED,
        "budget_exhausted",
    }
    account = Account.objects.get(game=game)
    assert account.balance >= 0 and account.held == 0
    assert ledger_ok()
    assert set(Turn.objects.filter(status=TurnStatus.FAILED).values_list("error_code", flat=True)) <= {
        "budget_exhausted"
    }


def test_every_completion_the_provider_billed_is_charged_once(dm, fake_openai, studio_conf):
    studio_conf(MAX_TOOL_CALLS_PER_STEP=4, MAX_TOOL_CALLS_PER_TURN=6, MAX_MODEL_STEPS=3)
    memory_make(dm, is_open=True)
    fake_openai.answer_for = lambda body: calls(5) if body.get("tools") else completion("Enough.")

    turn = turn_send(agent=dm, content="Go on.")

    billed = sum(usage["prompt_tokens"] + usage["completion_tokens"] for _, usage in fake_openai.billed)
    model = CostLine.objects.get(turn_id=turn.uuid, kind="model")
    assert (model.quantity, model.detail["calls"]) == (billed, len(fake_openai.billed))
    assert Decimal(model.amount) > 0


# --- arguments and answers the studio cannot read -----------------------------------------------


def test_arguments_nested_thousands_deep_are_an_error_the_model_reads_and_the_turn_goes_on(dm, fake_openai):
    deep = "[" * 2000 + "]" * 2000
    fake_openai.push(
        completion(tool_calls=[tool_call("open_memory", '{"name": ' + deep + "}")]), completion("Sorry.")
    )

    turn = turn_send(agent=dm, content="Open it, deeply.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Sorry.")
    [refused] = tool_entries(turn)
    assert refused["isError"] and "nested deeper than 32 levels" in refused["result"]
    assert len(refused["arguments"]) <= 2000  # a preview of what it sent, not all of it
    assert fees(turn) == 1


def test_arguments_over_their_size_bound_are_an_error_the_model_reads(dm, fake_openai, studio_conf):
    studio_conf(MAX_TOOL_ARGUMENTS_BYTES=1000)
    fake_openai.push(
        calls(1, "close_memory", {"name": "quest", "description": "d", "content": "x" * 5000}),
        completion("Too long, then."),
    )

    turn = turn_send(agent=dm, content="Write a lot.")

    assert turn.reply == "Too long, then."
    [refused] = tool_entries(turn)
    assert refused["isError"] and "over the 1,000 bytes" in refused["result"]
    assert not Memory.objects.filter(agent=dm).exists()


def test_an_answer_the_studio_cannot_read_fails_the_turn_and_is_charged(dm, fake_openai):
    fake_openai.push(
        raw(200, '{"id": "x", "object": "chat.completion", "choices": []}', content_type="application/json")
    )

    turn = turn_send(agent=dm, content="Hello?")

    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "model_output_invalid")
    model = CostLine.objects.get(turn_id=turn.uuid, kind="model")
    assert model.detail["inputTokens"] > 0  # what was sent, when the provider reports nothing


def test_a_step_whose_first_attempt_timed_out_is_charged_for_both(dm, fake_openai, studio_conf):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5)
    fake_openai.push(completion("Too late.", delay=3), completion("In time."))

    turn = turn_send(agent=dm, content="Are you there?")

    assert turn.reply == "In time."
    model = CostLine.objects.get(turn_id=turn.uuid, kind="model")
    assert model.detail["calls"] == 2


@pytest.mark.django_db(transaction=True)
def test_a_compaction_whose_first_attempt_timed_out_is_charged_for_both(dm, fake_openai, studio_conf):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, COMPACTION_RUNNER="none")
    for n in range(3):
        fake_openai.push(completion(f"Reply {n}."))
        turn_send(agent=dm, content=f"Message {n}.")
    fake_openai.push(compaction_answer("They talked.", delay=3), compaction_answer("They talked."))

    compaction = compaction_request(agent=dm, reason=CompactionReason.MANUAL)
    # The timed-out attempt billed its input: another inside the call would
    # spend past what the compaction holds, so the compaction's next attempt
    # (holding anew) makes it.
    with pytest.raises(CompactionRetry):
        compaction_run(str(compaction.uuid))
    compaction_run(str(compaction.uuid))

    line = CostLine.objects.get(compaction_id=compaction.uuid, kind="compaction")
    answered = fake_openai.billed[-1][1]
    # What the answer reported, and the input the attempt before it sent.
    assert line.detail["inputTokens"] > answered["prompt_tokens"]
    assert Compaction.objects.get(pk=compaction.pk).status == CompactionStatus.DONE


@pytest.mark.django_db(transaction=True)
def test_a_compaction_whose_answer_nests_2000_deep_is_charged_every_token_the_provider_billed(
    dm, fake_openai, game, studio_conf
):
    studio_conf(COMPACTION_RUNNER="none", COMPACTION_MAX_ATTEMPTS=3)
    for n in range(3):
        fake_openai.push(completion(f"Reply {n}."))
        turn_send(agent=dm, content=f"Message {n}.")
    deep = '{"a": ' * 2_000 + "1" + "}" * 2_000  # fits a reply; nothing may recurse into it
    for _ in range(3):
        fake_openai.push(completion(deep, usage=(900, 300)))
    compaction = compaction_request(agent=dm, reason=CompactionReason.MANUAL)
    balance = Account.objects.get(game=game).balance

    for attempt in range(3):
        with pytest.raises(CompactionFailed if attempt == 2 else CompactionRetry):
            compaction_run(str(compaction.uuid))

    ended = Compaction.objects.get(pk=compaction.pk)
    assert ended.status == CompactionStatus.FAILED and "nested deeper than 32 levels" in ended.error
    billed = [usage for _, usage in fake_openai.billed[-3:]]
    assert billed == [{"prompt_tokens": 900, "completion_tokens": 300, "total_tokens": 1200}] * 3
    line = CostLine.objects.get(compaction_id=compaction.uuid, kind="compaction")
    assert (line.detail["inputTokens"], line.detail["outputTokens"], line.quantity) == (2_700, 900, 3_600)
    assert Account.objects.get(game=game).balance == balance - line.amount and line.amount > 0
    assert ledger_ok()


# --- the compactor's answer, bounded ----------------------------------------------------------


def test_a_summary_past_its_bound_is_kept_cut_and_the_agent_can_still_be_sent_to(
    define, fake_openai, studio_conf
):
    studio_conf(COMPACTION_RUNNER="none")
    agent = define("dm", model=MODEL, max_tokens=8000, memory_enabled=False)
    for n in range(3):
        fake_openai.push(completion(f"Reply {n}."))
        turn_send(agent=agent, content=f"Message {n}.")
    # Steered past "keep the new summary under 1600 tokens", within its output limit.
    fake_openai.push(compaction_answer("The player insisted this be remembered verbatim. " * 900))

    compaction_run(str(compaction_request(agent=agent, reason=CompactionReason.MANUAL).uuid))

    checkpoint = Checkpoint.objects.filter(agent=agent).latest("id")
    assert count_tokens(checkpoint.summary) <= 1600 and checkpoint.summary.endswith("…")
    assert checkpoint.block_tokens < agent.max_tokens // 2
    fake_openai.push(completion("Still here."))
    assert turn_send(agent=agent, content="Hello again.").reply == "Still here."


def test_a_dropped_rewrite_past_any_memorys_size_is_kept_cut_in_the_memorys_history(
    dm, fake_openai, studio_conf
):
    studio_conf(COMPACTION_RUNNER="none")
    memory_make(dm, content="Find the key.", is_open=True)
    for n in range(3):
        fake_openai.push(completion(f"Reply {n}."))
        turn_send(agent=dm, content=f"Message {n}.")
    fake_openai.push(compaction_answer("They talked.", {"quest": "x" * 3_000_000}))

    compaction_run(str(compaction_request(agent=dm, reason=CompactionReason.MANUAL).uuid))

    dropped = MemoryEvent.objects.get(agent=dm, change="dropped")
    assert len(dropped.after["content"]) < 300_000 and dropped.after["chars"] == 3_000_000
    assert Memory.objects.get(agent=dm, name="quest").content == "Find the key."
