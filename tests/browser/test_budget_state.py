"""Money on the pages, in Chromium: a refused send links to Billing, and a
staff user's large take-away asks before it goes through, with each form
error next to its field."""

import re

import pytest
from playwright.sync_api import expect

from billing import ledger
from billing.models import Account, Adjustment

from .conftest import sign_in

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
        "This takes away 999.950000 credits, leaving 0.050000 of 1,000.000000."
    )
    assert Adjustment.objects.count() == 2  # the opening credits and the top-up

    confirm.check()
    form.get_by_role("button", name="Adjust").click()

    expect(form.locator("[data-result]")).to_have_text(
        "Adjusted by -999.950000 credits. The balance is now 0.050000."
    )
    expect(page.locator("[data-balance]")).to_have_text("0.050000")
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
