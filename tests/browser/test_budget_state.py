"""Money on the pages, in Chromium: a refused send links to Billing, and a
staff user's large take-away asks before it goes through, with each form
error next to its field; each game's budget state in its colour, the games
most urgent first, when its sends stop at the rate it spends, and amounts
short with the exact figure on hover."""

import csv
import io
import os
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from agents.services import AgentDefinition, agent_define
from billing import ledger
from billing.models import Account, Adjustment, CostKind, CostLine
from studio.services import game_create

from .conftest import ROOT, sign_in, studio_member

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/studio/ashmere/agents/dm/"


def test_a_refused_send_links_to_billing(page, member, agent, game):
    Account.objects.filter(game=game).update(balance=0)
    sign_in(page, member)
    page.goto(PAGE)
    expect(page.locator("[data-live-status]")).to_have_text("live")
    box = page.locator(".send-box")

    box.get_by_label("What the player says").fill("I push open the chapel door.")
    box.get_by_role("button", name="Send").click()

    result = box.locator("[data-result]")
    expect(result).to_contain_text("cannot pay for this send")
    expect(result).not_to_contain_text("/api/")
    result.get_by_role("link", name="See Billing").click()
    expect(page).to_have_url(re.compile(r"/studio/ashmere/billing/$"))
    expect(page.locator("[data-funding=none]")).to_contain_text("Sends are refused.")


def test_a_large_take_away_asks_before_it_goes_through(page, staff_member, game):
    ledger.adjustment_post(game=game, amount=900, reason="Top-up", made_by="sam")
    sign_in(page, staff_member)
    page.goto("/studio/ashmere/billing/")
    form = page.locator("form[action$='/billing/adjustments/']")
    confirm = form.get_by_label("Yes, take these credits away")
    expect(confirm).to_be_hidden()

    form.get_by_label("Amount").fill("-999.95")
    form.get_by_label("Reason").fill("Meant for another game")
    form.get_by_role("button", name="Adjust").click()

    expect(confirm).to_be_visible()
    expect(confirm).to_be_focused()
    expect(form.locator("[data-field-error=confirm]")).to_contain_text(
        "This takes away 999.95 credits, leaving 0.05 of 1,000.00."
    )
    assert Adjustment.objects.count() == 2  # the opening credits and the top-up

    confirm.check()
    form.get_by_role("button", name="Adjust").click()

    expect(form.locator("[data-result]")).to_have_text(
        "Adjusted by -999.95 credits. The balance is now 0.05."
    )
    expect(page.locator("[data-balance]")).to_have_text("0.05")
    expect(page.locator("[data-balance] .amount")).to_have_attribute("title", "0.050000 credits")
    expect(confirm).to_be_hidden()
    expect(confirm).not_to_be_checked()


def test_each_adjust_form_error_is_shown_by_its_field(page, staff_member, game):
    sign_in(page, staff_member)
    page.goto("/studio/ashmere/billing/")
    form = page.locator("form[action$='/billing/adjustments/']")

    form.get_by_label("Amount").fill("lots")
    form.get_by_role("button", name="Adjust").click()

    expect(form.get_by_label("Amount")).to_have_attribute("aria-invalid", "true")
    expect(form.get_by_label("Reason")).to_have_attribute("aria-invalid", "true")
    expect(form.locator("[data-field-error=amount]")).to_contain_text(
        "Enter the amount as a number of credits"
    )
    expect(form.locator("[data-field-error=reason]")).to_contain_text("Give a reason")
    expect(form.get_by_label("Amount")).to_be_focused()

    form.get_by_label("Amount").fill("25")
    form.get_by_role("button", name="Adjust").click()
    expect(form.get_by_label("Amount")).not_to_have_attribute("aria-invalid", "true")
    expect(form.locator("[data-field-error]")).to_have_count(1)


# --- budgets with foresight ---------------------------------------------------------------------------

RED, AMBER = "rgb(180, 35, 24)", "rgb(154, 98, 0)"  # --error, --warn


def spent(game, amount, *, hours_ago: float) -> None:
    line = CostLine.objects.create(
        game=game, agent_name="dm", kind=CostKind.MODEL, label="Model", quantity=1, amount=Decimal(amount)
    )
    CostLine.objects.filter(pk=line.pk).update(created_at=line.created_at - timedelta(hours=hours_ago))


@pytest.fixture
def three_games(game, password_hash):
    """ashmere (ok, spending), thin (below its alert) and broke (refused):
    one user of all three."""
    user = studio_member("mara", game, "designer", password_hash)
    games = {"ashmere": game}
    for slug in ("thin", "broke"):
        games[slug] = game_create(slug=slug, credits=100)[0]
        studio_member(f"ines-{slug}", games[slug], "admin", password_hash)
        user.memberships.create(game=games[slug], role="designer")
    for each in games.values():
        agent_define(
            game=each, name="dm", definition=AgentDefinition(max_tokens=16000), by=None, via="command"
        )
    Account.objects.filter(game=games["thin"]).update(balance=50, low_balance_alert=100)
    Account.objects.filter(game=games["broke"]).update(balance=0)
    spent(game, "14", hours_ago=3)  # 14 a day: the 100 go in about 7 days
    return user, games


def test_the_games_list_shows_each_state_in_its_colour_most_urgent_first(page, three_games):
    user, _ = three_games
    sign_in(page, user)

    page.goto("/studio/")

    cards = page.locator(".game-card")
    expect(cards).to_have_count(3)
    assert [cards.nth(i).get_attribute("data-game") for i in range(3)] == ["broke", "thin", "ashmere"]
    broke, thin, calm = (page.locator(f'[data-game="{slug}"]') for slug in ("broke", "thin", "ashmere"))
    expect(broke.locator("[data-budget-state]").first).to_have_text("Refused")
    expect(broke).to_have_css("border-left-color", RED)
    expect(broke.locator(".funding")).to_have_class(re.compile(r"\bnotice-error\b"))
    expect(thin.locator("[data-budget-state]").first).to_have_text("Low")
    expect(thin).to_have_css("border-left-color", AMBER)
    expect(thin.locator(".funding")).to_contain_text("Below its low-balance alert of 100.00 credits.")
    expect(calm.locator("[data-budget-state]").first).to_have_text("OK")
    expect(calm.locator("[data-runway]")).to_contain_text(
        "At this rate, sends stop in about 7 days (the balance runs out)."
    )
    expect(calm.locator("[data-runway] .amount").first).to_have_attribute("title", "14.000000 credits")


def test_the_billing_page_says_when_sends_stop_and_its_prices_stay_in_their_card(page, three_games):
    user, _ = three_games
    sign_in(page, user)
    page.set_viewport_size({"width": 1366, "height": 900})

    page.goto("/studio/ashmere/billing/")

    foresight = page.locator("[data-foresight]")
    expect(foresight.locator("[data-budget-state]")).to_have_text("OK")
    expect(foresight).to_contain_text("At this rate, sends stop in about 7 days (the balance runs out).")
    expect(foresight).to_contain_text("Spent 14.00 in the last 24 hours, 14.00 in 7 days.")
    prices = page.locator(".prices-table")
    card = page.locator("section[aria-labelledby=prices-title]")
    table_right = prices.bounding_box()["x"] + prices.bounding_box()["width"]
    card_right = card.bounding_box()["x"] + card.bounding_box()["width"]
    assert table_right <= card_right
    expect(page.locator("[data-agent-spend=dm]")).to_contain_text("14.00")


def test_the_overview_lists_refused_sends_with_their_causes(page, member, game, api):
    agent_define(game=game, name="dm", definition=AgentDefinition(max_tokens=16000), by=None, via="command")
    Account.objects.filter(game=game).update(balance=0)
    for _ in range(2):
        assert api.post("/api/v1/agents/dm/messages", {"content": "Hi."}, format="json").status_code == 402
    sign_in(page, member)

    page.goto("/studio/ashmere/")

    expect(page.locator("[data-refusals-count]")).to_have_text("2")
    expect(page.locator('[data-refusal="balance_exhausted"]')).to_contain_text(
        "dm · No credits left · 2 refused"
    )
    expect(page.get_by_text("Nothing failed lately.")).to_have_count(0)
    expect(page.locator(".notice.funding")).to_have_css("color", RED)


def test_a_game_admin_sets_a_webhook_sees_its_secret_once_and_the_deliveries(page, admin_member, game):
    from billing.models import AlertDelivery

    for name, tokens in (("dm", 16000), ("innkeeper", 8000)):
        agent_define(
            game=game, name=name, definition=AgentDefinition(max_tokens=tokens), by=None, via="command"
        )
    Account.objects.filter(game=game).update(
        balance=Decimal("42.316"),
        low_balance_alert=50,
        monthly_cap=60,
        month=ledger.this_month(),
        month_spent=Decimal("59.945"),  # 0.055 left: innkeeper’s hold (0.049) fits, dm’s (0.065) not
    )
    spent(game, "31.2", hours_ago=30)
    spent(game, "9.75", hours_ago=5)
    CostLine.objects.create(
        game=game,
        agent_name="innkeeper",
        kind=CostKind.MEMORY_ACCESS,
        label="Memory access",
        quantity=4,
        amount=Decimal("0.004"),
    )
    now = timezone.now()
    for status, code, attempts, error in (("delivered", 200, 1, ""), ("pending", 500, 2, "HTTP 500")):
        AlertDelivery.objects.create(
            game=game,
            channel="webhook",
            event="budget.low",
            target="https://93.184.216.34/studio-alerts",
            body={"data": {"trigger": "lowBalanceAlert"}},
            status=status,
            status_code=code,
            attempts=attempts,
            error=error,
            next_attempt_at=now + timedelta(minutes=2),
        )
    sign_in(page, admin_member)
    page.goto("/studio/ashmere/billing/")
    form = page.locator("form[data-alerts-form]")

    form.get_by_label("Webhook URL").fill("https://93.184.216.34/studio-alerts")
    form.get_by_role("button", name="Save").click()

    result = form.locator("[data-result]")
    expect(result).to_contain_text("The webhook's signing secret, shown this once — copy it now: whsec_")
    page.reload()
    expect(page.locator("[data-secret-hint]")).to_have_text(re.compile(r"^whsec_….{4}$"))
    expect(page.locator("[data-foresight] [data-budget-state]")).to_have_text("Refused")
    expect(page.locator("[data-foresight] [data-runway]")).to_contain_text(
        "Some agents’ sends are refused now; at this rate the rest stop within a day (the monthly cap is reached)."
    )
    expect(page.locator("[data-cap-left]")).to_contain_text("left: enough for innkeeper’s sends, not dm’s")
    expect(page.locator('[data-delivery-status="pending"] [data-status-code]')).to_have_text("500")
    expect(page.locator('[data-delivery-status="delivered"] [data-attempts]')).to_have_text("1")
    if os.environ.get("STUDIO_DOCS_SCREENSHOTS"):  # docs/images/billing.png, for the README and docs/pages.md
        page.screenshot(path=str(ROOT / "docs" / "images" / "billing.png"), full_page=True)


def test_spend_by_agent_downloads_as_csv_with_the_exact_amounts(page, member, game):
    for agent, kind, amount in (("dm", CostKind.MODEL, "1.234567"), ("bard", CostKind.MODEL, "2.5")):
        CostLine.objects.create(
            game=game,
            agent_name=agent,
            kind=kind,
            label=CostKind(kind).label,
            quantity=1,
            amount=Decimal(amount),
        )
    sign_in(page, member)
    page.goto("/studio/ashmere/billing/")
    spend = page.locator("[data-agent-spend=dm]")
    expect(spend.locator(".amount").first).to_have_attribute("title", "1.234567 credits")

    with page.expect_download() as download:
        page.locator("[data-export=agent-spend]").click()

    assert re.fullmatch(
        r"ashmere-spend-by-agent-\d{4}-\d{2}-\d{2}-30d\.csv", download.value.suggested_filename
    )
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text(encoding="utf-8"))))
    assert [(row["agent"], row["model"], row["total"]) for row in rows] == [
        ("bard", "2.500000", "2.500000"),
        ("dm", "1.234567", "1.234567"),
    ]
