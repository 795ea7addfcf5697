"""Compactions pay like turns: each model call is held for before it is
made, within the balance and the monthly cap, and charged out of that
hold; a manual compaction the game cannot pay for is refused (402
`insufficient_credits`); an automatic one waits, refusing the agent's sends
the same way, until the game can pay — so the balance never goes below
zero."""

from decimal import Decimal

import pytest

from agents import compaction
from agents.compaction import compaction_request
from agents.models import Checkpoint, Compaction, CompactionReason, CompactionStatus, TurnStatus
from agents.providers.scripted import ScriptedProvider
from billing import ledger
from billing.models import Account, CostLine
from studio.errors import PaymentRequired
from tests.support.sending import turn_send

from ..conftest import error_of

pytestmark = pytest.mark.django_db(transaction=True)

# About 300 tokens: three of them pass 75% of a 1,000-token window.
LONG = "The bells of the drowned chapel ring under the water. " * 27


def account(game) -> Account:
    return Account.objects.get(game=game)


def balance_to(game, amount: str) -> None:
    """Set the game's balance by an adjustment, as an operator would."""
    ledger.adjustment_post(
        game=game, amount=Decimal(amount) - account(game).balance, reason="set", made_by="ops"
    )


def assert_ledger_exact():
    checks = ledger.ledger_check()
    assert all(check.is_consistent for check in checks), checks
    assert all(check.balance >= 0 for check in checks)


@pytest.fixture
def small(define):
    """An agent with a small window, memory off: a few long messages fill it."""
    return define("dm", memory_enabled=False, max_tokens=1000)


def test_a_manual_compaction_the_game_cannot_pay_for_is_refused_and_nothing_queued(api, small, game):
    turn_send(agent=small, content="m1")
    turn_send(agent=small, content="m2")
    balance_to(game, "0.000010")

    response = api.post("/api/v1/agents/dm/compact")

    assert response.status_code == 402
    assert error_of(response)["code"] == "insufficient_credits"
    assert not Compaction.objects.exists()
    assert account(game).balance == Decimal("0.000010")


def test_a_compaction_holds_what_its_call_can_cost_and_is_charged_out_of_it(small, game, monkeypatch):
    turn_send(agent=small, content="m1")
    turn_send(agent=small, content="m2")
    held_during_call = []
    summarize = ScriptedProvider.summarize

    def watched(self, request):
        held_during_call.append(account(game).held)
        return summarize(self, request)

    monkeypatch.setattr(ScriptedProvider, "summarize", watched)

    compaction = compaction_request(agent=small, reason=CompactionReason.MANUAL)

    compaction.refresh_from_db()
    assert compaction.status == CompactionStatus.DONE
    line = CostLine.objects.get(compaction_id=compaction.uuid)
    assert held_during_call[0] >= line.amount > 0
    assert account(game).held == 0 and compaction.held == 0
    assert_ledger_exact()


def test_the_monthly_cap_bounds_a_compaction_as_it_bounds_a_send(api, small, game):
    turn_send(agent=small, content="m1")
    turn_send(agent=small, content="m2")
    spent = account(game).month_spent
    Account.objects.filter(game=game).update(monthly_cap=spent + Decimal("0.000010"))

    response = api.post("/api/v1/agents/dm/compact")

    assert response.status_code == 402
    assert error_of(response)["code"] == "insufficient_credits"


def test_an_automatic_compaction_the_game_cannot_pay_for_waits_and_refuses_sends_until_it_can(
    api, small, game, studio_conf
):
    # A compaction's call may write a lot; a send's hold is far smaller.
    studio_conf(COMPACTION_MAX_OUTPUT_TOKENS=1_000_000)
    balance_to(game, "1")
    for _ in range(3):
        assert api.post("/api/v1/agents/dm/messages", {"content": LONG}, format="json").status_code == 200

    waiting = Compaction.objects.get(agent=small)
    assert (waiting.status, waiting.awaits_credits, waiting.attempts) == (CompactionStatus.QUEUED, True, 0)
    listed = api.get("/api/v1/agents/dm/compactions").json()["compactions"][0]
    assert listed["waitingForCredits"] is True and "cannot pay" in listed["error"]
    assert not Checkpoint.objects.exists()
    assert_ledger_exact()

    refused = api.post("/api/v1/agents/dm/messages", {"content": "And now?"}, format="json")
    assert refused.status_code == 402
    assert error_of(refused)["code"] == "insufficient_credits"

    ledger.adjustment_post(game=game, amount=20, reason="top-up", made_by="ops")
    sent = api.post("/api/v1/agents/dm/messages", {"content": "And now?"}, format="json")

    assert sent.status_code == 200
    waiting.refresh_from_db()
    assert (waiting.status, waiting.awaits_credits) == (CompactionStatus.DONE, False)
    assert Checkpoint.objects.filter(agent=small).exists()
    assert_ledger_exact()


def test_sends_refused_while_a_compaction_waits_for_credits_plan_it_once(
    api, small, game, studio_conf, monkeypatch
):
    studio_conf(COMPACTION_MAX_OUTPUT_TOKENS=1_000_000)
    balance_to(game, "1")
    for _ in range(3):
        api.post("/api/v1/agents/dm/messages", {"content": LONG}, format="json")
    assert Compaction.objects.get(agent=small).awaits_credits
    planned = []
    plan = compaction._plan
    monkeypatch.setattr(compaction, "_plan", lambda *args: planned.append(1) or plan(*args))

    refusals = [api.post("/api/v1/agents/dm/messages", {"content": "Now?"}, format="json") for _ in range(5)]

    assert [r.status_code for r in refusals] == [402] * 5
    # Planning reads and counts everything it would fold: done once, not per refusal.
    assert len(planned) <= 1


def test_a_send_that_needs_room_fails_when_the_game_cannot_pay_for_the_compaction(small, game, studio_conf):
    studio_conf(COMPACTION_MAX_OUTPUT_TOKENS=1_000_000, COMPACTION_SOFT_RATIO=1.0)
    balance_to(game, "1")
    for _ in range(3):
        turn_send(agent=small, content=LONG)

    turn = turn_send(agent=small, content=LONG)

    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "insufficient_credits")
    assert "cannot pay for the compaction" in turn.error
    with pytest.raises(PaymentRequired):
        turn_send(agent=small, content="Still?")
    assert_ledger_exact()


def test_a_compaction_that_makes_no_model_call_runs_whatever_the_balance(define, game):
    agent = define("dm", memory_enabled=False, max_tokens=1000, compaction_type="sliding-window")
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    balance_to(game, "0")

    compaction = compaction_request(agent=agent, reason=CompactionReason.MANUAL)

    compaction.refresh_from_db()
    assert compaction.status == CompactionStatus.DONE and compaction.checkpoint is not None
    assert not CostLine.objects.filter(kind="compaction").exists()
