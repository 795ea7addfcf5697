"""Budgets with foresight: each game's spend rate (the last 24 hours and 7
days, from its cost lines, one aggregate statement), when its sends stop at
that rate (the balance runs out, or the cap is reached), and its state —
ok, low (below its alert; amber), refused (red) — on every game card and
list, the games sorted by urgency, the admin's Accounts list, and the API."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from billing import ledger
from billing.budgets import game_budget, game_budgets
from billing.models import Account, CostKind, CostLine
from billing.selectors import SpendRate, spend_rates
from studio.models import Membership, Role
from studio.services import game_create
from tests.conftest import error_of

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def spent(game, amount, *, ago: timedelta, agent="dm", now=None):
    """A cost line of `amount` made `ago` before `now` (its balance left alone)."""
    line = CostLine.objects.create(
        game=game, agent_name=agent, kind=CostKind.MODEL, label="Model", quantity=1, amount=Decimal(amount)
    )
    CostLine.objects.filter(pk=line.pk).update(created_at=(now or timezone.now()) - ago)


# --- the spend rate ----------------------------------------------------------------------------


def test_the_spend_rate_sums_the_last_day_and_week_in_one_statement(
    game, other_game, django_assert_num_queries
):
    spent(game, "1.5", ago=timedelta(hours=2), now=NOW)
    spent(game, "2", ago=timedelta(days=3), now=NOW)
    spent(game, "40", ago=timedelta(days=8), now=NOW)  # older than a week
    spent(game, "9", ago=timedelta(hours=-1), now=NOW)  # after `now`
    spent(other_game, "7", ago=timedelta(hours=1), now=NOW)

    with django_assert_num_queries(1):
        rates = spend_rates([game.pk, other_game.pk], now=NOW)

    assert rates[game.pk] == SpendRate(day=Decimal("1.5"), week=Decimal("3.5"))
    assert rates[other_game.pk] == SpendRate(day=Decimal(7), week=Decimal(7))


def test_the_rate_foresight_goes_by_is_the_higher_of_the_day_and_the_weeks_daily_average():
    assert SpendRate(day=Decimal(1), week=Decimal(14)).per_day == 2
    assert SpendRate(day=Decimal(5), week=Decimal(7)).per_day == 5


# --- the runway ------------------------------------------------------------------------------------


def test_sends_stop_when_the_balance_runs_out_at_the_rate(game):
    spent(game, "14", ago=timedelta(days=2), now=NOW)  # 2 a day over the week; balance 100

    budget = game_budget(game, now=NOW)

    assert budget.runway.by == "balance"
    assert budget.runway.days == Decimal("50.0")
    assert budget.runway.at == NOW + timedelta(days=50)
    assert budget.runway_words == "At this rate, sends stop in about 50 days (the balance runs out)."


def test_a_cap_reached_this_month_stops_sends_first(game):
    Account.objects.filter(game=game).update(monthly_cap=20, month=NOW.date().replace(day=1), month_spent=14)
    spent(game, "14", ago=timedelta(days=2), now=NOW)  # 2 a day: the cap's 6 left go in 3 days

    budget = game_budget(game, now=NOW)

    assert (budget.runway.by, budget.runway.days) == ("cap", Decimal("3.0"))
    assert budget.runway_words == "At this rate, sends stop in about 3 days (the monthly cap is reached)."


def test_a_cap_that_resets_before_it_is_reached_stops_sends_next_month(game):
    # 1 a day, a 25 cap with 24 left on March 10: the month ends first; April's
    # 25 go by April 26.
    Account.objects.filter(game=game).update(monthly_cap=25, month=NOW.date().replace(day=1), month_spent=1)
    spent(game, "7", ago=timedelta(days=3), now=NOW)

    budget = game_budget(game, now=NOW)

    assert budget.runway.by == "cap"
    assert budget.runway.at == datetime(2026, 4, 26, tzinfo=UTC)


def test_a_cap_that_lasts_the_month_at_the_rate_never_stops_sends(game):
    Account.objects.filter(game=game).update(monthly_cap=40, month=NOW.date().replace(day=1), month_spent=1)
    spent(game, "7", ago=timedelta(days=3), now=NOW)  # 1 a day: 40 outlast any month

    assert game_budget(game, now=NOW).runway.by == "balance"


def test_a_game_that_refuses_some_agents_says_so_before_when_the_rest_stop(define, game):
    define("dm", max_tokens=16000)  # holds 0.065
    define("bard", memory_enabled=False, max_tokens=1000)  # holds 0.035
    Account.objects.filter(game=game).update(balance=Decimal("0.05"))
    spent(game, "0.01", ago=timedelta(hours=1))

    assert game_budget(game).runway_words == (
        "Some agents’ sends are refused now; at this rate the rest stop in about 5 days (the balance runs out)."
    )
    Account.objects.filter(game=game).update(balance=0)
    assert game_budget(game).runway_words == "Sends are refused now."


def test_no_spend_lately_has_no_runway(game):
    budget = game_budget(game, now=NOW)

    assert budget.runway is None
    assert budget.runway_words == "Nothing spent in the last 7 days."


# --- the state --------------------------------------------------------------------------------------


def test_a_game_below_its_alert_is_low_not_calm_blue(designer, define, game):
    define("dm")
    Account.objects.filter(game=game).update(balance=50, low_balance_alert=100)

    html = designer.get("/studio/ashmere/billing/").content.decode()

    assert game_budget(game).state == "low"
    assert re.search(r'class="notice funding notice-warn" data-funding="ok" data-budget-state="low"', html)
    assert "Below its low-balance alert of 100.00 credits." in html


def test_a_game_past_80_percent_of_its_cap_is_low(define, game):
    define("dm")
    Account.objects.filter(game=game).update(monthly_cap=10, month=ledger.this_month(), month_spent=8)

    assert game_budget(game).state == "low"


def test_a_game_that_refuses_some_send_is_refused(define, game):
    define("dm")
    Account.objects.filter(game=game).update(balance=Decimal("0.01"))

    budget = game_budget(game)

    assert budget.state == "refused"
    assert budget.state_words == "Sends are refused."


def test_a_game_with_room_and_no_alert_crossed_is_ok(define, game):
    define("dm")
    Account.objects.filter(game=game).update(low_balance_alert=10)

    assert game_budget(game).state == "ok"


# --- the games list, sorted by urgency ----------------------------------------------------------------


@pytest.fixture
def three_games(db):
    """calm (ok), thin (low) and broke (refused), each with an agent; a user of all three."""
    from agents.services import AgentDefinition, agent_define

    user = get_user_model().objects.create_user("mara", password="pw")
    games = {}
    for slug in ("calm", "thin", "broke"):
        game = game_create(slug=slug, credits=100)[0]
        agent_define(
            game=game, name="dm", definition=AgentDefinition(max_tokens=16000), by=None, via="command"
        )
        Membership.objects.create(user=user, game=game, role=Role.DESIGNER)
        games[slug] = game
    Account.objects.filter(game=games["thin"]).update(low_balance_alert=500)
    Account.objects.filter(game=games["broke"]).update(balance=0)
    return user, games


def test_the_games_list_puts_the_most_urgent_first_with_its_state(client, three_games):
    user, _ = three_games
    client.force_login(user)

    html = client.get("/studio/").content.decode()

    cards = re.findall(r'<section class="card game-card state-(\w+)" data-game="(\w+)"', html)
    assert cards == [("refused", "broke"), ("low", "thin"), ("ok", "calm")]
    assert 'data-budget-state="refused"' in html[html.index('data-game="broke"') :]


def test_among_equals_the_shortest_runway_comes_first(three_games):
    _, games = three_games
    Account.objects.filter(game=games["thin"]).update(low_balance_alert=None)
    spent(games["calm"], "70", ago=timedelta(hours=1))  # runs out in about a day and a half

    ordered = [budget.game.slug for budget in game_budgets(games.values())]

    assert ordered == ["broke", "calm", "thin"]


def test_the_games_list_reads_a_fixed_number_of_statements(
    client, three_games, django_assert_max_num_queries
):
    user, games = three_games
    client.force_login(user)
    client.get("/studio/")  # warm the session's statements
    more = game_create(slug="more", credits=5)[0]
    Membership.objects.create(user=user, game=more, role=Role.DESIGNER)

    with django_assert_max_num_queries(10):
        client.get("/studio/")


def test_a_game_card_says_when_sends_stop(client, three_games):
    user, games = three_games
    client.force_login(user)
    spent(games["calm"], "14", ago=timedelta(hours=20))  # 14 a day: 100 go in about 7 days

    html = client.get("/studio/").content.decode()

    card = html[html.index('data-game="calm"') :]
    assert (
        "At this rate, sends stop in about 7 days (the balance runs out)." in card[: card.index("</section>")]
    )


# --- the overview and the API -------------------------------------------------------------------------


def test_the_overview_shows_the_state_and_the_runway(designer, define, game):
    define("dm")
    spent(game, "10", ago=timedelta(hours=3))

    html = designer.get("/studio/ashmere/").content.decode()

    assert 'data-budget-state="ok"' in html
    assert "At this rate, sends stop in about 10 days (the balance runs out)." in html


def test_the_api_gives_the_spend_rate_and_the_runway(api, game):
    spent(game, "10", ago=timedelta(hours=3))
    spent(game, "4", ago=timedelta(days=2))

    body = api.get("/api/v1/billing").json()

    assert body["spendRate"] == {"day": "10.000000", "week": "14.000000"}
    assert body["runwayDays"] == 10.0
    runs_out = datetime.fromisoformat(body["runsOutAt"])
    assert timedelta(days=9, hours=23) < runs_out - timezone.now() <= timedelta(days=10)
    assert body["state"] == "ok"


def test_the_api_says_null_when_nothing_was_spent(api, game):
    body = api.get("/api/v1/billing").json()

    assert body["spendRate"] == {"day": "0.000000", "week": "0.000000"}
    assert body["runsOutAt"] is None and body["runwayDays"] is None


def test_the_billing_api_still_refuses_an_unknown_key(anonymous):
    assert error_of(anonymous.get("/api/v1/billing"))["code"] == "unauthenticated"


# --- the admin's Accounts list --------------------------------------------------------------------------


@pytest.fixture
def superuser_client(client, db):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return client


def test_the_admins_accounts_list_marks_each_games_state(
    superuser_client, three_games, django_assert_max_num_queries
):
    with django_assert_max_num_queries(16):
        html = superuser_client.get("/admin/billing/account/").content.decode()

    for slug, state in (("calm", "ok"), ("thin", "low"), ("broke", "refused")):
        row = html[html.index(f">{slug}<") :]
        assert re.search(rf'data-budget-state="{state}"', row[: row.index("</tr>")]), slug
    assert "Below its low-balance alert of 500.00 credits." in html
