"""The Billing page: /studio/<game>/billing/ — the balance and its limits,
spend over time, cost lines and each turn's breakdown, and adjustments.
Staff users adjust credits and raise or remove caps; the game's admins set
or lower the cap and set the low-balance alert; everyone else reads."""

import re
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from billing import ledger
from billing.chart import nice_step, spend_chart
from billing.ledger import credits_apart, credits_shown
from billing.models import Account, Adjustment, CostLine
from studio.models import Role
from tests.conftest import assert_sends_to_sign_in, call, error_of, page_user, script, with_query

QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the silver key."}
JSON = {"HTTP_X_REQUESTED_WITH": "fetch", "HTTP_ACCEPT": "application/json"}


def amount(exact) -> str:
    """An amount as the `credits` filter writes it: shown short, exact on hover."""
    return f'<span class="amount" title="{ledger.credits_text(exact)} credits">{credits_shown(exact)}</span>'


def page_url(game, **query) -> str:
    return with_query(f"/studio/{game.slug}/billing/", **query)


def balance_of(game) -> Decimal:
    return Account.objects.get(game=game).balance


def line_ids(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr data-line="(\d+)"', html)]


def adjust_url(game) -> str:
    return f"/studio/{game.slug}/billing/adjustments/"


def limits_url(game) -> str:
    return f"/studio/{game.slug}/billing/limits/"


def alert_url(game) -> str:
    return f"/studio/{game.slug}/billing/alert/"


@pytest.fixture
def staff(client, game):
    """The test client, signed in as sam: a staff user (an operator of the
    studio), in the game as a designer only — being staff is what counts."""
    user = page_user("sam", game, role=Role.DESIGNER)
    user.is_staff = True
    user.save()
    client.force_login(user)
    return client


@pytest.fixture
def turns(agent, define, send):
    """Two agents' turns: dm's with two memory tool calls, then bard's."""
    define("bard")
    first = send(script(call("close_memory", **QUEST), call("open_memory", name="quest"), {"say": "Hm."}))
    second = send("Sing.", name="bard")
    return first, second


def compaction_line(game, agent_name="dm"):
    with transaction.atomic():
        return ledger.charge_compaction(
            game_id=game.pk,
            agent_name=agent_name,
            compaction_id=uuid.uuid4(),
            model="scripted",
            usage=ledger.Usage(input_tokens=1200, output_tokens=300),
        )


# --- who may see it ----------------------------------------------------------------------


def test_it_needs_a_signed_in_user(client, game):
    assert_sends_to_sign_in(client, page_url(game))


def test_it_is_404_for_someone_outside_the_game(outsider_client, game):
    assert outsider_client.get(page_url(game)).status_code == 404
    assert (
        outsider_client.post(
            f"/studio/{game.slug}/billing/adjustments/", {"amount": "5", "reason": "x"}
        ).status_code
        == 404
    )
    assert balance_of(game) == Decimal("100")


# --- the balance ------------------------------------------------------------------------------


def test_it_shows_balance_held_available_and_this_months_spend(designer, game, turns):
    summary = ledger.account_summary(game)

    html = designer.get(page_url(game)).content.decode()

    assert f"data-balance>{amount(summary['balance'])}<" in html
    assert f"data-available>{amount(summary['available'])}<" in html
    assert f"data-held>{amount('0.000000')}<" in html
    assert f"data-month-spent>{amount(summary['monthSpent'])}<" in html
    assert "no monthly cap" in html


def test_a_monthly_cap_shows_as_a_meter_that_warns_past_80_percent(designer, game, turns):
    # 85% spent, with room for several more sends: amber, not red.
    ledger.limits_set(game=game, monthly_cap=10)
    Account.objects.filter(game=game).update(month=ledger.this_month(), month_spent=Decimal("8.5"))

    html = designer.get(page_url(game)).content.decode()

    assert 'data-meter="monthly-cap"' in html
    assert 'class="bar-fill warn"' in html


def test_credits_read_with_two_significant_decimals_and_grouped_thousands():
    assert credits_shown(Decimal("100")) == "100.00"
    assert credits_shown(Decimal("1234.5")) == "1,234.50"
    assert credits_shown(Decimal("999.966946")) == "999.97"
    assert credits_shown(Decimal("59.945")) == "59.95"  # half up, as the ledger rounds
    assert credits_shown(Decimal("0.064768")) == "0.065"
    assert credits_shown(Decimal("0.0025")) == "0.0025"
    assert credits_shown(Decimal("0.05")) == "0.05"
    assert credits_shown(Decimal("0.000001")) == "0.000001"
    assert credits_shown(Decimal("0.099999")) == "0.10"
    assert credits_shown(Decimal("-0.0000004")) == "0.00"
    assert credits_shown(Decimal("-12.345678")) == "-12.35"
    assert credits_shown(Decimal("250"), signed=True) == "+250.00"


def test_two_amounts_a_sentence_compares_are_shown_apart():
    assert credits_apart(Decimal("1.000002"), Decimal("0.999999")) == ("1.000002", "0.999999")
    assert credits_apart(Decimal("0.064768"), Decimal("0.042")) == ("0.065", "0.042")
    assert credits_apart(Decimal("2"), Decimal("2")) == ("2.00", "2.00")


# --- spend over time ----------------------------------------------------------------------------


def test_the_chart_stacks_each_days_spend_by_kind(designer, game, turns):
    compaction_line(game)
    CostLine.objects.filter(kind="compaction").update(created_at=timezone.now() - timedelta(days=3))

    html = designer.get(page_url(game)).content.decode()

    svg = html[html.index('<svg class="chart"') : html.index("</svg>")]
    assert svg.count('<rect class="hit"') == 30
    assert svg.count('<rect class="kind-model"') == 1  # all of today's model spend, one segment
    assert svg.count('<rect class="kind-memory_access"') == 1
    assert svg.count('<rect class="kind-compaction"') == 1  # three days ago
    assert ">Today</text>" in svg
    assert "credits</text>" in svg  # the y axis says what it counts
    for label in ("Model", "Memory access", "Compaction"):
        assert f'</span>{label} <span class="muted">' in html  # the legend


def test_spend_older_than_30_days_is_left_out_and_no_spend_says_so(designer, game, turns):
    CostLine.objects.update(created_at=timezone.now() - timedelta(days=31))

    html = designer.get(page_url(game)).content.decode()

    assert '<svg class="chart"' not in html
    assert "No spend in the last 30 days." in html


def test_the_charts_top_tick_is_at_or_above_the_busiest_day(game):
    CostLine.objects.create(game=game, agent_name="dm", kind="model", label="Model", quantity=1, amount=14)

    chart = spend_chart(game, timezone.localdate())

    assert [tick["label"] for tick in chart["ticks"]] == ["0", "5", "10", "15"]
    assert min(segment["y"] for bar in chart["bars"] for segment in bar["segments"]) >= chart["plot_top"]


def test_chart_steps_are_round_numbers():
    assert nice_step(Decimal("0.0123")) == Decimal("0.005")
    assert nice_step(Decimal("9")) == Decimal("2.5")
    assert nice_step(Decimal("400")) == Decimal("100")


# --- cost lines ----------------------------------------------------------------------------------


def test_cost_lines_are_listed_newest_first(designer, game, turns):
    compaction_line(game)

    html = designer.get(page_url(game)).content.decode()

    ids = list(CostLine.objects.filter(game=game).order_by("-id").values_list("id", flat=True))
    assert line_ids(html) == ids
    assert "compaction</span>" in html  # the compaction line has no turn to link


def test_lines_filter_by_agent_and_kind(designer, game, turns):
    bard = designer.get(page_url(game, agent="bard")).content.decode()
    assert set(line_ids(bard)) == set(CostLine.objects.filter(agent_name="bard").values_list("id", flat=True))
    assert '<option value="bard" selected>' in bard

    memory = designer.get(page_url(game, kind="memory_access")).content.decode()
    (line,) = CostLine.objects.filter(kind="memory_access")
    assert line_ids(memory) == [line.pk]
    assert "2 calls" in memory


def test_the_filter_controls_are_labelled(designer, game, turns):
    html = designer.get(page_url(game)).content.decode()

    for control in ("agent", "turn", "kind"):
        assert f'<label for="filter-{control}">' in html
        assert f'id="filter-{control}" name="{control}"' in html


def test_each_line_links_to_its_turns_breakdown(designer, game, turns):
    first, _ = turns

    html = designer.get(page_url(game)).content.decode()

    assert f'href="?turn={first["id"]}"' in html


def test_a_turns_breakdown_shows_quantities_prices_and_a_total(designer, game, turns):
    first, _ = turns

    html = designer.get(page_url(game, turn=first["id"])).content.decode()

    breakdown = html[html.index("data-turn-breakdown") :]
    kinds = re.findall(r'<tr data-line-kind="(\w+)"', breakdown)
    assert kinds == ["model", "memory_access"]  # Model, Memory access, Compaction
    assert "scripted: 2.00 in · 8.00 out per million tokens" in breakdown
    assert "0.001 per call" in breakdown
    assert "2 memory tool calls, errors included" in breakdown
    assert f"<strong>{amount(first['cost']['total'])}</strong>" in breakdown
    assert 'href="/studio/ashmere/agents/dm/"' in breakdown


def test_another_games_turn_has_no_lines_here(designer, game, other_game):
    from agents.services import AgentDefinition, agent_define
    from tests.support.sending import turn_send

    theirs, _ = agent_define(
        game=other_game, name="spy", definition=AgentDefinition(), by=None, via="command"
    )
    turn = turn_send(agent=theirs, content="hello")

    html = designer.get(page_url(game, turn=turn.uuid)).content.decode()

    assert "No cost lines for this turn in ashmere." in html
    assert "spy" not in html


def test_a_turn_filter_that_is_not_an_id_is_told_so_inline(designer, game, turns):
    response = designer.get(page_url(game, turn="not-a-turn"))

    html = response.content.decode()
    assert response.status_code == 200
    assert 'aria-invalid="true"' in html
    assert "That is not a turn id" in html
    assert line_ids(html) == []


def test_lines_are_paged(designer, game, agent, send):
    for _ in range(14):
        send("Go on.")  # 14 turns with a model line each
    for _ in range(12):
        compaction_line(game)

    first = designer.get(page_url(game)).content.decode()
    second = designer.get(page_url(game, page=2)).content.decode()

    assert len(line_ids(first)) == 25 and len(line_ids(second)) == 1
    assert "Page 1 of 2 · 26 lines" in first
    assert 'href="?page=2"' in first
    assert line_ids(first)[-1] > line_ids(second)[0]


def test_no_lines_yet_is_an_empty_state(designer, game):
    html = designer.get(page_url(game)).content.decode()

    assert "No spend yet." in html


# --- adjustments ---------------------------------------------------------------------------------


def test_designers_see_adjustments_but_no_forms(designer, game):
    html = designer.get(page_url(game)).content.decode()

    assert "Opening credits" in html
    assert "billing/adjustments/" not in html and "billing/limits/" not in html
    assert "billing/alert/" not in html
    assert "Only the game’s admins set its monthly cap and low-balance alert" in html


@pytest.mark.parametrize("who", ["designer", "admin"])
def test_a_page_users_adjustment_is_403_unless_they_are_staff(request, game, who):
    client = request.getfixturevalue(who)

    response = client.post(adjust_url(game), {"amount": "50", "reason": "more"}, **JSON)

    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"
    assert balance_of(game) == Decimal("100")
    assert client.post(adjust_url(game), {"amount": "50", "reason": "more"}).status_code == 403
    assert balance_of(game) == Decimal("100")


def test_a_designer_cannot_set_the_cap_or_the_alert(designer, game):
    response = designer.post(limits_url(game), {"monthly_cap": "5", "cap": "set"})
    alert = designer.post(alert_url(game), {"low_balance_alert": "5", "alert": "set"})

    assert (response.status_code, alert.status_code) == (403, 403)
    account = Account.objects.get(game=game)
    assert (account.monthly_cap, account.low_balance_alert) == (None, None)


def test_admins_see_the_cap_and_alert_forms_but_not_the_adjust_form(admin, game):
    html = admin.get(page_url(game)).content.decode()

    assert f'action="/studio/{game.slug}/billing/limits/"' in html
    assert f'action="/studio/{game.slug}/billing/alert/"' in html
    assert '<label for="alert-amount">' in html
    assert f'action="/studio/{game.slug}/billing/adjustments/"' not in html
    assert "Remove cap" not in html
    assert "Credits are added or taken away by the studio’s operators" in html


def test_staff_see_every_form(staff, game):
    html = staff.get(page_url(game)).content.decode()

    assert f'action="/studio/{game.slug}/billing/adjustments/"' in html
    assert f'action="/studio/{game.slug}/billing/limits/"' in html
    assert f'action="/studio/{game.slug}/billing/alert/"' in html
    assert "Remove cap" in html
    assert '<label for="adjust-amount">' in html and '<label for="adjust-reason">' in html


def test_staff_outside_the_game_do_not_see_its_page(client, other_game, game):
    user = page_user("sam", other_game)
    user.is_staff = True
    user.save()
    client.force_login(user)

    assert client.get(page_url(game)).status_code == 404
    assert client.post(adjust_url(game), {"amount": "5", "reason": "x"}).status_code == 404
    assert balance_of(game) == Decimal("100")


def test_a_staff_adjustment_moves_the_balance_and_keeps_who_and_why(staff, game):
    response = staff.post(adjust_url(game), {"amount": "250.5", "reason": "Playtest weekend"}, **JSON)

    assert response.status_code == 200, response.content
    assert response.json()["message"] == "Adjusted by +250.50 credits. The balance is now 350.50."
    assert balance_of(game) == Decimal("350.5")
    adjustment = Adjustment.objects.latest("id")
    assert (adjustment.amount, adjustment.reason, adjustment.made_by) == (
        Decimal("250.5"),
        "Playtest weekend",
        "sam",
    )
    html = staff.get(page_url(game, fragment="adjustments")).content.decode()
    assert "Playtest weekend" in html and "+250.50" in html


def test_a_plain_form_post_redirects_back_with_the_news(staff, game):
    response = staff.post(adjust_url(game), {"amount": "-10", "reason": "Refund"}, follow=True)

    assert response.redirect_chain == [(page_url(game), 302)]
    assert "Adjusted by -10.00 credits. The balance is now 90.00." in response.content.decode()
    assert balance_of(game) == Decimal("90")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"amount": "50", "reason": ""}, "Give a reason: every adjustment is kept with who made it and why."),
        ({"amount": "lots", "reason": "x"}, "Enter the amount as a number of credits, like 250 or -10.5."),
        ({"amount": "0", "reason": "x"}, "An adjustment of 0 changes nothing"),
        ({"amount": "1.0000001", "reason": "x"}, "Credits have at most six decimal places."),
    ],
)
def test_bad_adjustments_are_refused_with_a_reason(staff, game, body, message):
    response = staff.post(adjust_url(game), body, **JSON)

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"
    assert message in error_of(response)["message"]
    assert balance_of(game) == Decimal("100")


def test_a_bad_plain_form_post_shows_the_error_by_its_field(staff, game):
    response = staff.post(adjust_url(game), {"amount": "lots", "reason": ""})

    html = response.content.decode()
    assert response.status_code == 400
    amount_field = html[html.index('id="adjust-amount"') : html.index('id="adjust-reason"')]
    assert 'value="lots"' in amount_field
    assert "Enter the amount as a number of credits" in amount_field
    assert "Give a reason" in html[html.index('id="adjust-reason"') :]


def test_each_bad_field_is_named_in_the_answer_so_the_page_can_mark_it(staff, game):
    response = staff.post(adjust_url(game), {"amount": "lots", "reason": ""}, **JSON)

    assert response.status_code == 400
    details = error_of(response)["details"]
    assert [(d["field"], d["message"].split(":")[0].split(",")[0]) for d in details] == [
        ("amount", "Enter the amount as a number of credits"),
        ("reason", "Give a reason"),
    ]


def test_a_take_away_of_half_the_balance_or_more_asks_for_confirmation_first(staff, game):
    ledger.adjustment_post(game=game, amount=900, reason="Top-up", made_by="sam")

    asked = staff.post(adjust_url(game), {"amount": "-999.95", "reason": "Wrong game"}, **JSON)

    assert asked.status_code == 400
    assert error_of(asked)["details"] == [
        {
            "field": "confirm",
            "message": "This takes away 999.95 credits, leaving 0.05 of 1,000.00. Tick the box "
            "to confirm, then press Adjust again.",
        }
    ]
    assert balance_of(game) == Decimal("1000")

    confirmed = staff.post(
        adjust_url(game), {"amount": "-999.95", "reason": "Wrong game", "confirm": "on"}, **JSON
    )
    assert confirmed.status_code == 200
    assert balance_of(game) == Decimal("0.05")


def test_a_small_take_away_needs_no_confirmation(staff, game):
    response = staff.post(adjust_url(game), {"amount": "-49.99", "reason": "Refund"}, **JSON)

    assert response.status_code == 200
    assert balance_of(game) == Decimal("50.01")


def test_a_plain_form_post_of_a_large_take_away_shows_the_box_to_tick(staff, game):
    response = staff.post(adjust_url(game), {"amount": "-100", "reason": "Close the game"})

    html = response.content.decode()
    assert response.status_code == 400
    confirm = html[html.index('data-field="confirm"') :]
    assert confirm.startswith('data-field="confirm">')  # not hidden
    assert "This takes away 100.00 credits, leaving 0.00 of 100.00." in confirm
    assert balance_of(game) == Decimal("100")


def test_the_adjustment_url_takes_only_posts(staff, game):
    assert staff.get(adjust_url(game)).status_code == 405


# --- the monthly cap ------------------------------------------------------------------------------


def test_an_admin_sets_a_cap_and_lowers_it(admin, game):
    response = admin.post(limits_url(game), {"monthly_cap": "500", "cap": "set"}, **JSON)
    assert response.status_code == 200
    assert response.json()["message"] == "The monthly cap is now 500.00 credits."
    assert Account.objects.get(game=game).monthly_cap == Decimal("500")
    assert 'value="500.000000"' in admin.get(page_url(game)).content.decode()

    response = admin.post(limits_url(game), {"monthly_cap": "200", "cap": "set"}, **JSON)
    assert response.json()["message"] == "The monthly cap is now 200.00 credits."
    assert Account.objects.get(game=game).monthly_cap == Decimal("200")


@pytest.mark.parametrize("body", [{"monthly_cap": "900", "cap": "set"}, {"monthly_cap": "", "cap": "clear"}])
def test_an_admin_may_not_raise_or_remove_the_cap(admin, game, body):
    ledger.limits_set(game=game, monthly_cap=500)

    response = admin.post(limits_url(game), body, **JSON)

    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"
    assert "operators (its staff users)" in error_of(response)["message"]
    assert Account.objects.get(game=game).monthly_cap == Decimal("500")


def test_an_admins_refused_raise_on_a_plain_form_post_says_why_by_the_form(admin, game):
    ledger.limits_set(game=game, monthly_cap=500)

    response = admin.post(limits_url(game), {"monthly_cap": "900", "cap": "set"})

    html = response.content.decode()
    assert response.status_code == 403
    cap_form = html[html.index('id="cap-title"') :]
    assert "operators (its staff users)" in cap_form
    assert 'value="900"' in cap_form


def test_staff_raise_and_remove_the_cap(staff, game):
    ledger.limits_set(game=game, monthly_cap=500)

    response = staff.post(limits_url(game), {"monthly_cap": "900", "cap": "set"}, **JSON)
    assert response.json()["message"] == "The monthly cap is now 900.00 credits."

    response = staff.post(limits_url(game), {"monthly_cap": "900", "cap": "clear"}, **JSON)
    assert response.json()["message"] == "Removed the monthly cap."
    assert Account.objects.get(game=game).monthly_cap is None


@pytest.mark.parametrize(
    ("cap", "message"),
    [
        ("-5", "The cap cannot be negative."),
        ("", "Enter a monthly cap, or use “Remove cap”"),
        ("x", "like 500"),
    ],
)
def test_a_bad_cap_is_refused_with_a_reason(admin, game, cap, message):
    response = admin.post(limits_url(game), {"monthly_cap": cap, "cap": "set"}, **JSON)

    assert response.status_code == 400
    assert message in error_of(response)["message"]
    assert Account.objects.get(game=game).monthly_cap is None


# --- the low-balance alert ------------------------------------------------------------------------


def test_an_admin_sets_and_turns_off_the_low_balance_alert(admin, game):
    response = admin.post(alert_url(game), {"low_balance_alert": "12.5", "alert": "set"}, **JSON)

    assert response.status_code == 200, response.content
    assert response.json()["message"] == (
        "The low-balance alert is now 12.50 credits: budget.low is sent when a charge takes the balance below it."
    )
    assert response.json()["lowBalanceAlert"] == "12.500000"
    assert Account.objects.get(game=game).low_balance_alert == Decimal("12.5")
    html = admin.get(page_url(game)).content.decode()
    assert 'value="12.500000"' in html
    assert "data-low-balance-alert" in html

    response = admin.post(alert_url(game), {"low_balance_alert": "12.5", "alert": "clear"}, **JSON)
    assert response.json()["message"] == "The low-balance alert is off."
    assert Account.objects.get(game=game).low_balance_alert is None


@pytest.mark.parametrize(
    ("alert", "message"),
    [
        ("-5", "The alert cannot be negative."),
        ("", "Enter a balance to be alerted below, or use “Turn off”"),
        ("x", "like 10"),
    ],
)
def test_a_bad_alert_is_refused_with_a_reason(admin, game, alert, message):
    response = admin.post(alert_url(game), {"low_balance_alert": alert, "alert": "set"}, **JSON)

    assert response.status_code == 400
    assert message in error_of(response)["message"]
    assert Account.objects.get(game=game).low_balance_alert is None


# --- fragments -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fragment", ["summary", "lines", "adjustments"])
def test_each_fragment_renders_on_its_own(designer, game, turns, fragment):
    response = designer.get(page_url(game, fragment=fragment))

    html = response.content.decode().strip()
    assert response.status_code == 200
    assert f'data-live-fragment="{fragment}"' in html.split(">")[0]
    assert "<html" not in html


def test_the_page_takes_the_same_queries_however_many_lines(
    designer, game, agent, send, django_assert_max_num_queries
):
    send("One.")
    with django_assert_max_num_queries(30) as few:
        designer.get(page_url(game))
    queries = len(few.captured_queries)  # before requests reset the log
    for _ in range(5):
        send(script(call("close_memory", **QUEST), {"say": "Noted."}))
        compaction_line(game)

    with django_assert_max_num_queries(queries):
        designer.get(page_url(game))


def test_a_turns_breakdown_narrowed_by_kind_says_its_total_is_partial(designer, game, turns):
    first, _ = turns

    html = designer.get(page_url(game, turn=first["id"], kind="memory_access")).content.decode()

    breakdown = html[html.index("data-turn-breakdown") :]
    assert re.findall(r'<tr data-line-kind="(\w+)"', breakdown) == ["memory_access"]
    assert "Total of the lines shown" in breakdown
    assert f"<strong>{amount('0.002000')}</strong>" in breakdown
