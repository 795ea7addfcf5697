"""Money on the pages, in Chromium: a refused send links to Billing, and a
staff user's large take-away asks before it goes through, with each form
error next to its field."""

import re

import pytest
from playwright.sync_api import expect

from billing.models import Account

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
