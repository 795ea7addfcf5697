"""Budgets: refusal before any model call, holds, the monthly spend cap,
price changes, the ledger check, and parallel sends that cannot overdraw."""

import threading
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Sum

from agents.models import Block, Turn, TurnStatus
from agents.providers.scripted import ScriptedProvider
from billing import ledger
from billing.models import Account, Adjustment, CostLine, ModelPrice
from studio.errors import PaymentRequired
from tests.support.sending import turn_send

from ..conftest import call, client_for, error_of, script


def account(game) -> Account:
    return Account.objects.get(game=game)


def cost_of(turn) -> Decimal:
    return sum(CostLine.objects.filter(turn_id=turn.uuid).values_list("amount", flat=True))


def hold_of(agent) -> Decimal:
    return ledger.hold_estimate(max_tokens=agent.max_tokens, price=ledger.model_price(agent.model))


def test_a_send_is_refused_with_402_before_any_model_call_when_the_game_cannot_pay(
    api, agent, game, monkeypatch
):
    Account.objects.filter(game=game).update(balance=hold_of(agent) - Decimal("0.000001"))
    calls = []
    monkeypatch.setattr(ScriptedProvider, "complete", lambda *a: calls.append(a))

    response = api.post("/api/v1/agents/dm/messages", {"content": "hello"}, format="json")

    assert response.status_code == 402
    error = error_of(response)
    assert error["code"] == "budget_exhausted"
    assert ledger.credits_text(hold_of(agent)) in error["message"]
    assert calls == []
    assert not Turn.objects.exists()


def test_the_refusals_say_who_can_add_credits_or_raise_the_cap_and_name_no_endpoint_the_key_cannot_use(
    api, agent, game
):
    Account.objects.filter(game=game).update(balance=0)
    no_credits = error_of(api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json"))
    Account.objects.filter(game=game).update(balance=100, monthly_cap=0)
    no_room = error_of(api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json"))

    assert (no_credits["code"], no_room["code"]) == ("budget_exhausted", "spend_cap_reached")
    for error, what in ((no_credits, "add credits: ask them"), (no_room, "raise the monthly cap: ask them")):
        assert "/api/v1/billing" not in error["message"]
        assert f"operators (its staff users) {what}" in error["message"]


def test_a_refilled_game_can_send_again(api, agent, game):
    Account.objects.filter(game=game).update(balance=0)
    assert api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json").status_code == 402

    ledger.adjustment_post(game=game, amount="5.000000", reason="top-up", made_by="boss")

    assert api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json").status_code == 200


def test_a_turn_gives_its_hold_back_whatever_way_it_ends(agent, game):
    turn_send(agent=agent, content="completed")
    turn_send(agent=agent, content=script({"fail": "down"}))
    turn_send(agent=agent, content="transient", transient=True)

    assert account(game).held == 0
    assert all(t.has_ended for t in Turn.objects.all())


def test_what_running_turns_hold_is_not_available_to_other_sends(agent, game):
    hold = hold_of(agent)
    Account.objects.filter(game=game).update(balance=hold * 2, held=hold * 2)  # two turns running

    with pytest.raises(PaymentRequired, match="held by running turns"):
        turn_send(agent=agent, content="a third")


def test_a_price_change_applies_to_later_turns_and_lines_keep_their_price(agent):
    first = turn_send(agent=agent, content="before the change")
    first_line = CostLine.objects.get(turn_id=first.uuid, kind="model")
    ModelPrice.objects.filter(model="scripted").update(
        input_per_mtok=Decimal("200"), output_per_mtok=Decimal("800")
    )

    second = turn_send(agent=agent, content="after the change")

    first_line_now = CostLine.objects.get(pk=first_line.pk)
    second_line = CostLine.objects.get(turn_id=second.uuid, kind="model")
    assert first_line_now.amount == first_line.amount
    assert first_line_now.detail["inputPerMTok"] == "2.000000"
    assert second_line.detail["inputPerMTok"] == "200.000000"
    expected = ledger.credits(
        (Decimal(second_line.detail["inputTokens"]) * 200 + Decimal(second_line.detail["outputTokens"]) * 800)
        / 1_000_000
    )
    assert second_line.amount == expected


# --- the monthly spend cap ----------------------------------------------------------------


def limits(client, body):
    return client.put("/api/v1/billing/limits", body, format="json")


def test_an_admin_key_sets_a_cap_where_there_is_none_and_lowers_it(admin_api, game):
    response = limits(admin_api, {"monthlyCap": "50.000000"})

    assert response.status_code == 200
    assert response.json()["monthlyCap"] == "50.000000"
    assert admin_api.get("/api/v1/billing").json()["monthlyCap"] == "50.000000"
    assert limits(admin_api, {"monthlyCap": "20"}).json()["monthlyCap"] == "20.000000"
    assert limits(admin_api, {"monthlyCap": "20"}).status_code == 200  # the same cap again
    assert account(game).monthly_cap == Decimal(20)


@pytest.mark.parametrize("cap", ["20.000001", "1000", None])
def test_an_admin_key_may_not_raise_or_remove_the_cap(admin_api, game, cap):
    ledger.limits_set(game=game, monthly_cap=20)

    response = limits(admin_api, {"monthlyCap": cap})

    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "forbidden"
    assert "operators (its staff users)" in error["message"]
    assert "set a cap where there is none, or lower it" in error["message"]
    assert account(game).monthly_cap == Decimal(20)


def test_staff_raise_and_remove_the_cap(game):
    ledger.limits_set(game=game, monthly_cap=20)

    ledger.limits_set(game=game, monthly_cap=1000, by_staff=True)
    assert account(game).monthly_cap == Decimal(1000)
    ledger.limits_set(game=game, monthly_cap=None, by_staff=True)
    assert account(game).monthly_cap is None


def test_a_designer_key_sets_no_limit(api, game):
    for body in ({"monthlyCap": "1.000000"}, {"lowBalanceAlert": "1.000000"}):
        response = limits(api, body)

        assert response.status_code == 403
        assert error_of(response)["code"] == "forbidden"
    assert (account(game).monthly_cap, account(game).low_balance_alert) == (None, None)


def test_a_bad_cap_is_a_400(admin_api):
    response = admin_api.put("/api/v1/billing/limits", {"monthlyCap": "-5"}, format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


def test_sends_stop_with_spend_cap_reached_when_the_month_has_spent_its_cap(api, agent, game):
    ledger.limits_set(game=game, monthly_cap=hold_of(agent) * 3)
    refused = None
    for _ in range(50):
        response = api.post("/api/v1/agents/dm/messages", {"content": "x " * 200}, format="json")
        if response.status_code != 200:
            refused = response
            break

    assert refused is not None and refused.status_code == 402
    assert error_of(refused)["code"] == "spend_cap_reached"
    summary = ledger.account_summary(game)
    assert Decimal(summary["monthSpent"]) <= hold_of(agent) * 3
    assert account(game).balance > 0  # the cap stopped it, not the balance


def test_budget_low_is_sent_once_when_80_percent_of_the_cap_is_spent(
    define, game, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr("studio.live.events._send", lambda agent_id, event: sent.append((agent_id, event)))
    # Input-priced only, so a turn of ~400 tokens costs a good share of the
    # hold (a full 1000-token context): the cap is reached in a few dozen sends.
    ModelPrice.objects.filter(model="scripted").update(output_per_mtok=0)
    agent = define("dm", memory_enabled=False, max_tokens=1000)
    hold = hold_of(agent)
    ledger.limits_set(game=game, monthly_cap=hold * 10)
    message = "word " * 400  # a transient send of ~400 tokens: history does not grow

    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(PaymentRequired) as refused:
            for _ in range(200):
                turn_send(agent=agent, content=message, transient=True)

    assert refused.value.code == "spend_cap_reached"
    lows = [(agent_id, event) for agent_id, event in sent if event["type"] == "budget.low"]
    assert len(lows) == 1
    agent_id, event = lows[0]
    assert agent_id == agent.pk  # into the stream of each of the game's agents
    assert event["trigger"] == "monthlyCap"
    assert hold * 8 <= Decimal(event["monthSpent"]) < hold * 10


# --- the low-balance alert ---------------------------------------------------------------


def test_an_admin_key_sets_and_clears_the_low_balance_alert_and_every_key_reads_it(admin_api, api, game):
    response = limits(admin_api, {"lowBalanceAlert": "10.000000"})

    assert response.status_code == 200
    assert response.json()["lowBalanceAlert"] == "10.000000"
    assert response.json()["monthlyCap"] is None  # what the body leaves out is kept
    assert api.get("/api/v1/billing").json()["lowBalanceAlert"] == "10.000000"
    assert limits(admin_api, {"lowBalanceAlert": None}).json()["lowBalanceAlert"] is None
    assert account(game).low_balance_alert is None


def test_the_cap_and_the_alert_are_set_apart_or_together(admin_api, game):
    limits(admin_api, {"monthlyCap": "50", "lowBalanceAlert": "5"})
    limits(admin_api, {"monthlyCap": "40"})

    assert (account(game).monthly_cap, account(game).low_balance_alert) == (Decimal(40), Decimal(5))
    assert limits(admin_api, {}).json()["monthlyCap"] == "40.000000"  # nothing to change


@pytest.mark.parametrize("alert", ["-1", "x", "", 5, "1.0000001"])
def test_a_bad_alert_is_a_400(admin_api, game, alert):
    response = limits(admin_api, {"lowBalanceAlert": alert})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"
    assert "lowBalanceAlert" in error_of(response)["message"]
    assert account(game).low_balance_alert is None


def budget_lows(sent) -> list[dict]:
    return [event for _, event in sent if event["type"] == "budget.low"]


def test_budget_low_is_sent_once_when_a_charge_takes_the_balance_below_the_alert_and_again_only_after_it_rose_above(
    define, game, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr("studio.live.events._send", lambda agent_id, event: sent.append((agent_id, event)))
    agent = define("dm", memory_enabled=False)
    one_turn = cost_of(turn_send(agent=agent, content="hello", transient=True))
    ledger.limits_set(game=game, low_balance_alert=account(game).balance - one_turn * Decimal("2.5"))

    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(2):
            turn_send(agent=agent, content="hello", transient=True)
        assert budget_lows(sent) == []  # still above it
        for _ in range(3):
            turn_send(agent=agent, content="hello", transient=True)
    (low,) = budget_lows(sent)
    assert low["trigger"] == "lowBalanceAlert"
    assert Decimal(low["balance"]) < Decimal(low["lowBalanceAlert"]) == account(game).low_balance_alert
    assert low["agent"] == "dm"

    with django_capture_on_commit_callbacks(execute=True):
        ledger.adjustment_post(game=game, amount=one_turn * 10, reason="top-up", made_by="boss")
        for _ in range(14):
            turn_send(agent=agent, content="hello", transient=True)

    assert len(budget_lows(sent)) == 2  # once more, after the top-up took it back above
    assert account(game).balance < account(game).low_balance_alert


def test_a_top_up_that_leaves_the_balance_below_the_alert_does_not_send_it_again(
    define, game, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr("studio.live.events._send", lambda agent_id, event: sent.append((agent_id, event)))
    agent = define("dm", memory_enabled=False)
    ledger.limits_set(game=game, low_balance_alert=account(game).balance)

    with django_capture_on_commit_callbacks(execute=True):
        turn_send(agent=agent, content="hello", transient=True)
        ledger.adjustment_post(game=game, amount="0.000001", reason="a crumb", made_by="boss")
        turn_send(agent=agent, content="hello", transient=True)

    assert len(budget_lows(sent)) == 1


# --- the ledger ---------------------------------------------------------------------------


def test_checkledger_passes_when_the_balance_is_the_ledger_sum(agent, game):
    turn_send(agent=agent, content=script(call("open_memory", name="x")))
    out = StringIO()

    call_command("checkledger", stdout=out)

    assert f"ok      {game.slug}" in out.getvalue()


def test_checkledger_fails_loudly_when_a_balance_drifts(agent, game):
    turn_send(agent=agent, content="hello")
    Account.objects.filter(game=game).update(balance=Decimal("12.345678"))
    out = StringIO()

    with pytest.raises(CommandError, match="1 game"):
        call_command("checkledger", stdout=out)
    assert "WRONG   ashmere: balance 12.345678" in out.getvalue()


def test_an_admin_adjusts_in_the_django_admin_and_the_balance_moves(client, game):
    user = get_user_model().objects.create_superuser("boss", password="pw-12345678")
    client.force_login(user)
    before = account(game).balance

    response = client.post(
        "/admin/billing/adjustment/add/", {"game": game.pk, "amount": "25.500000", "reason": "Festival bonus"}
    )

    assert response.status_code == 302, response.content[:500]
    adjustment = Adjustment.objects.get(reason="Festival bonus")
    assert adjustment.made_by == "boss"
    assert account(game).balance == before + Decimal("25.5")


# --- concurrency ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_parallel_sends_across_agents_never_overdraw_and_the_ledger_balances(define, game, monkeypatch):
    agents = [define(f"npc{i}") for i in range(6)]
    hold = hold_of(agents[0])
    Account.objects.filter(game=game).update(balance=hold * 2)
    Adjustment.objects.filter(game=game).update(amount=hold * 2)  # keep the ledger true to the new balance
    barrier = threading.Barrier(len(agents))
    outcomes = []
    # The sends really are at once, however the machine schedules them: the
    # first model call of each agent waits until every agent has tried its
    # first send, so the two the balance covers hold it while the others try.
    tried, everyone_tried, first_call = [], threading.Event(), threading.local()
    complete = ScriptedProvider.complete

    def one_more_tried():
        tried.append(1)
        if len(tried) == len(agents):
            everyone_tried.set()

    def held_complete(self, request, control):
        if not getattr(first_call, "made", False):
            first_call.made = True
            one_more_tried()
            assert everyone_tried.wait(60)
        return complete(self, request, control)

    monkeypatch.setattr(ScriptedProvider, "complete", held_complete)

    def send(agent):
        try:
            barrier.wait()
            for _ in range(3):
                outcomes.append(
                    turn_send(
                        agent=agent, content=script(call("open_memory", name="x"), {"say": "ok"})
                    ).status
                )
        except PaymentRequired:
            outcomes.append("refused")
            if not getattr(first_call, "made", False):
                first_call.made = True
                one_more_tried()
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(a,)) for a in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    final = account(game)
    assert "refused" in outcomes and TurnStatus.COMPLETED in outcomes
    # Every model call was covered before it was made: never below zero.
    assert final.balance >= 0
    assert final.held == 0
    assert all(check.is_consistent for check in ledger.ledger_check())
    failed = Turn.objects.filter(status=TurnStatus.FAILED)
    assert set(failed.values_list("error_code", flat=True)) <= {"budget_exhausted"}
    ran = Turn.objects.exclude(started_at=None)
    assert CostLine.objects.filter(kind="model").count() == ran.count()
    # A fee is charged for each call that ran, and none for a call not run
    # because the game could not cover it and a reply after it.
    calls = [e for b in Block.objects.all() for e in b.entries if e["type"] == "tool_call"]
    ran_calls = [e for e in calls if not e["result"].startswith("Not run")]
    fees = CostLine.objects.filter(kind="memory_access").aggregate(n=Sum("quantity"))["n"] or 0
    assert fees == len(ran_calls)


def test_a_key_reads_its_own_games_balance_and_limits_never_another_games(api, admin_api, outsider, game):
    # Both games start with 100 credits and no cap: set ours apart.
    ledger.adjustment_post(game=game, amount="5.000000", reason="top-up", made_by="boss")
    admin_api.put("/api/v1/billing/limits", {"monthlyCap": "50.000000"}, format="json")

    ours, theirs = api.get("/api/v1/billing").json(), outsider.get("/api/v1/billing").json()

    assert (ours["balance"], ours["monthlyCap"]) == ("105.000000", "50.000000")
    assert (theirs["balance"], theirs["monthlyCap"]) == ("100.000000", None)
    assert client_for(None).get("/api/v1/billing").status_code == 401
