"""Spend stays within holds: what cannot fit is refused before anything is
spent, and every model call after a turn's first is covered before it is
made."""

from decimal import Decimal

import pytest
from django.db import transaction

from agents.models import Block, Checkpoint, CheckpointKind, Compaction, Turn, TurnStatus
from agents.providers.base import Usage
from agents.providers.scripted import ScriptedProvider
from billing import ledger
from billing.models import Account, Adjustment, CostLine
from memories.models import Memory
from memories.tools import tool_run
from tests.support.sending import turn_send

from ..conftest import call, error_of, script

WORDS = "the tide comes in over the drowned chapel "  # 8 tokens


def set_balance(game, amount: Decimal) -> None:
    amount = ledger.credits(amount)
    Account.objects.filter(game=game).update(balance=amount)
    Adjustment.objects.filter(game=game).update(amount=amount)  # the ledger stays true


def hold_of(agent) -> Decimal:
    return ledger.hold_estimate(max_tokens=agent.max_tokens, price=ledger.model_price(agent.model))


def assert_nothing_spent(game, before: Decimal):
    account = Account.objects.get(game=game)
    assert (account.balance, account.held) == (before, 0)
    assert not CostLine.objects.exists()


# --- a message that can never fit ---------------------------------------------------------


def test_a_message_larger_than_max_tokens_is_413_and_nothing_runs(api, define, game, monkeypatch):
    define("dm", memory_enabled=False, max_tokens=256)
    calls = []
    monkeypatch.setattr(ScriptedProvider, "complete", lambda *a: calls.append(a))
    before = Account.objects.get(game=game).balance

    response = api.post("/api/v1/agents/dm/messages", {"content": WORDS * 40}, format="json")

    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "context_too_large"
    assert "over maxTokens 256" in error["message"]
    assert calls == []
    assert not Turn.objects.exists() and not Block.objects.exists()
    assert_nothing_spent(game, before)


def test_the_checkpoints_block_counts_against_a_message(api, define, game):
    agent = define("dm", memory_enabled=False, max_tokens=1000)
    Checkpoint.objects.create(
        agent=agent,
        kind=CheckpointKind.COMPACTION,
        through_block=0,
        summary="long",
        context_block="(a long summary)",
        block_tokens=700,
    )
    message = WORDS * 40  # 320 tokens: alone it fits, beside the block it cannot

    response = api.post("/api/v1/agents/dm/messages", {"content": message}, format="json")

    assert response.status_code == 413
    assert "context block (700 together)" in error_of(response)["message"]


@pytest.mark.django_db(transaction=True)  # compactions run after commit
def test_a_message_that_fits_only_after_a_compaction_is_not_refused(api, define):
    agent = define("dm", memory_enabled=False, max_tokens=1000)
    for n in range(4):
        turn_send(agent=agent, content=f"{n} {WORDS * 25}")  # ~200 tokens each, twice in the block

    response = api.post("/api/v1/agents/dm/messages", {"content": WORDS * 40}, format="json")

    assert response.status_code == 200
    assert response.json()["turn"]["status"] == "completed"


@pytest.mark.django_db(transaction=True)
def test_a_context_still_over_max_tokens_after_a_compaction_is_never_sent(define, studio_conf, monkeypatch):
    studio_conf(COMPACTION_SOFT_RATIO=10.0)  # only the overflow check asks for a compaction
    agent = define("dm", memory_enabled=False, max_tokens=1000)
    # The newest block alone is 700 tokens: a compaction keeps it, and the
    # next message does not fit beside it.
    turn_send(agent=agent, content="first")
    turn_send(agent=agent, content=script({"say": WORDS * 80}))
    calls = []
    original = ScriptedProvider.complete
    monkeypatch.setattr(ScriptedProvider, "complete", lambda *a: calls.append(1) or original(*a))

    turn = turn_send(agent=agent, content=WORDS * 40)

    assert Compaction.objects.filter(agent=agent, status="done").exists()
    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "context_too_large")
    assert "even after a compaction" in turn.error
    assert calls == []
    assert not CostLine.objects.filter(turn_id=turn.uuid).exists()


# --- definitions ------------------------------------------------------------------------------


def test_a_system_prompt_that_leaves_no_room_is_refused(api):
    prompt = WORDS * 80  # 640 tokens; the memory tools' definitions take about 450 more

    refused = api.put(
        "/api/v1/agents/dm",
        {"systemPrompt": prompt, "memory": {"maxOpenTokens": 400}, "compaction": {"maxTokens": 1400}},
        format="json",
    )
    fits = api.put(
        "/api/v1/agents/dm",
        {"systemPrompt": prompt, "memory": {"maxOpenTokens": 200}, "compaction": {"maxTokens": 1400}},
        format="json",
    )
    no_memory = api.put(
        "/api/v1/agents/npc", {"systemPrompt": prompt, "compaction": {"maxTokens": 640}}, format="json"
    )

    assert refused.status_code == 400
    error = error_of(refused)
    assert error["code"] == "invalid_definition"
    assert "leaves no room" in error["message"] and "maxOpenTokens (400)" in error["message"]
    assert "memory tools' definitions take" in error["message"]
    assert fits.status_code == 201
    assert no_memory.status_code == 400


# --- each model call after the first ------------------------------------------------------------


QUEST = {"name": "quest", "description": "What the player wants", "content": "Find the key."}


def tool_calls_of(turn) -> list[dict]:
    return [e for e in Block.objects.get(turn=turn).entries if e["type"] == "tool_call"]


def test_a_tool_call_the_game_cannot_cover_with_a_reply_after_it_is_not_run_and_the_player_still_gets_words(
    define, game
):
    agent = define("dm")
    set_balance(game, hold_of(agent) + Decimal("0.000001"))  # one call's worst case, and no more

    turn = turn_send(
        agent=agent,
        content=script(call("close_memory", **QUEST), call("open_memory", name="npcs"), {"say": "hi"}),
    )

    assert (turn.status, turn.reply, turn.cut_short_code) == (TurnStatus.COMPLETED, "hi", "budget_exhausted")
    [refused] = tool_calls_of(turn)
    assert (refused["name"], refused["isError"]) == ("close_memory", True)
    assert refused["result"].startswith("Not run")
    assert not Memory.objects.filter(agent=agent).exists()
    assert not CostLine.objects.filter(turn_id=turn.uuid, kind="memory_access").exists()
    # The step that asked for the call, and the one more call for words.
    assert CostLine.objects.get(turn_id=turn.uuid, kind="model").detail["calls"] == 2
    account = Account.objects.get(game=game)
    assert account.balance >= 0 and account.held == 0
    assert all(check.is_consistent for check in ledger.ledger_check()), ledger.ledger_check()


def test_a_tool_call_past_the_monthly_cap_is_not_run_and_the_spend_stays_within_it(define, game, admin_api):
    agent = define("dm")
    one_call = hold_of(agent)
    admin_api.put("/api/v1/billing/limits", {"monthlyCap": ledger.credits_text(one_call)}, format="json")

    turn = turn_send(agent=agent, content=script(call("close_memory", **QUEST), {"say": "hi"}))

    assert (turn.status, turn.reply, turn.cut_short_code) == (TurnStatus.COMPLETED, "hi", "budget_exhausted")
    assert not Memory.objects.filter(agent=agent).exists()
    assert Account.objects.get(game=game).month_spent <= one_call


def test_a_turn_with_no_room_left_for_a_reply_fails_saying_why(define, game, monkeypatch):
    agent = define("dm")
    set_balance(game, hold_of(agent) + Decimal("0.000001"))
    # A step that costs its whole hold leaves nothing for one more call.
    original = ScriptedProvider.complete

    def costly(self, request, control):
        reply = original(self, request, control)
        if request.tools:
            reply.usage = Usage(input_tokens=agent.max_tokens, output_tokens=4096)
        return reply

    monkeypatch.setattr(ScriptedProvider, "complete", costly)

    turn = turn_send(agent=agent, content=script(call("close_memory", **QUEST), {"say": "hi"}))

    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "budget_exhausted")
    assert "not run" in turn.error
    assert CostLine.objects.get(turn_id=turn.uuid, kind="model").detail["calls"] == 1
    account = Account.objects.get(game=game)
    assert account.balance >= 0 and account.held == 0


def memories_of(agent, count: int, tokens: int) -> None:
    """`count` closed memories of about `tokens` tokens each."""
    for n in range(count):
        with transaction.atomic():
            tool_run(
                agent=agent,
                name="close_memory",
                arguments={"name": f"m{n}", "description": "d", "content": "x " * tokens},
            )


def reading_all(count: int) -> str:
    """A message whose calls open and close each memory in turn: every
    open's result (the memory's content) grows the turn's context."""
    steps = []
    for n in range(count):
        steps += [call("open_memory", name=f"m{n}"), call("close_memory", name=f"m{n}")]
    return script(*steps, {"say": "done"})


def test_a_turn_whose_context_outgrows_its_hold_holds_more_and_gives_it_all_back(define, game):
    agent = define("dm", max_tokens=1100, max_open_tokens=290)
    memories_of(agent, 3, 250)  # with the tools' ~450, three opens take the turn's context past 1100

    turn = turn_send(agent=agent, content=reading_all(3))

    assert turn.status == TurnStatus.COMPLETED
    turn.refresh_from_db()
    assert turn.held > hold_of(agent)
    assert all(check.is_consistent for check in ledger.ledger_check())
    assert Account.objects.get(game=game).held == 0


def test_a_turn_whose_context_grows_past_what_the_game_can_cover_stops_with_a_reply(define, game):
    agent = define("dm", max_tokens=1100, max_open_tokens=290)
    memories_of(agent, 3, 250)
    set_balance(game, hold_of(agent) * Decimal("1.2"))

    turn = turn_send(agent=agent, content=reading_all(3))

    assert (turn.status, turn.reply, turn.cut_short_code) == (
        TurnStatus.COMPLETED,
        "done",
        "budget_exhausted",
    )
    assert 0 < len(tool_calls_of(turn)) < 6
    account = Account.objects.get(game=game)
    assert account.balance >= 0 and account.held == 0
    assert all(check.is_consistent for check in ledger.ledger_check()), ledger.ledger_check()
