"""One money format wherever a person reads an amount: six places, thousands
grouped — the compaction table, the billing cards, adjustments, the games
list, and the sentences the pages and the ledger write."""

import re
from decimal import Decimal

import pytest
from django.template.loader import render_to_string

from agents.models import Agent
from billing import ledger
from billing.models import Account
from studio.models import Role
from tests.conftest import error_of, page_user

JSON = {"HTTP_X_REQUESTED_WITH": "fetch", "HTTP_ACCEPT": "application/json"}
SIX_PLACES = re.compile(r"^[+-]?\d{1,3}(,\d{3})*\.\d{6}$")


@pytest.fixture
def staff(client, game):
    user = page_user("sam", game, role=Role.DESIGNER)
    user.is_staff = True
    user.save()
    client.force_login(user)
    return client


def cells(html: str, selector_start: str) -> list[str]:
    """The text of each `<td class="num">` after `selector_start`."""
    part = html[html.index(selector_start) :]
    return [text.strip() for text in re.findall(r'<td class="num[^"]*"[^>]*>([^<]*)</td>', part)]


def test_the_compaction_tables_cost_reads_with_six_places(
    designer, agent, send, django_capture_on_commit_callbacks
):
    for words in ("I knock.", "I wait.", "I listen."):
        send(words)
    with django_capture_on_commit_callbacks(execute=True):
        assert designer.post("/studio/ashmere/agents/dm/compact/", **JSON).status_code == 202

    html = designer.get("/studio/ashmere/agents/dm/?fragment=compactions").content.decode()

    (cost,) = cells(html, "compactions-table")
    assert SIX_PLACES.match(cost), cost


def test_a_cost_summed_by_sqlite_reads_with_six_places_too():
    # The embedded default's SQLite sums a compaction's lines into a Decimal
    # with every place a float had.
    page = {
        "compactions": [
            {
                "id": "c1",
                "status": "done",
                "reasonLabel": "Asked for",
                "attempts": 1,
                "throughBlock": 2,
                "cost": Decimal("0.00437400000000000"),
            }
        ]
    }

    html = render_to_string("agents/_compactions.html", {"page": page})

    assert cells(html, "compactions-table") == ["0.004374"]


def test_held_reads_as_every_other_card_does(designer, game):
    Account.objects.filter(game=game).update(held=Decimal("0.5"))

    html = designer.get("/studio/ashmere/billing/").content.decode()

    assert re.search(r"data-held [^>]*>0\.500000<", html)
    assert re.search(r"data-balance [^>]*>100\.000000<", html)


def test_an_adjustment_reads_signed_with_six_places_and_grouped_thousands(staff, game):
    staff.post("/studio/ashmere/billing/adjustments/", {"amount": "1000", "reason": "Playtest"}, **JSON)

    html = staff.get("/studio/ashmere/billing/?fragment=adjustments").content.decode()

    assert cells(html, "adjustments-table") == ["+1,000.000000", "+100.000000"]  # and the opening credits


def test_the_games_list_reads_the_balance_as_billing_does(designer, game):
    Account.objects.filter(game=game).update(balance=Decimal("1234.5"))

    html = designer.get("/studio/").content.decode()

    assert "1,234.500000" in html


def test_a_cap_reads_the_same_in_the_pages_news_and_in_the_refusal(admin, api, agent, game):
    news = admin.post("/studio/ashmere/billing/limits/", {"monthly_cap": "0.05", "cap": "set"}, **JSON)
    Account.objects.filter(game=game).update(month=ledger.this_month(), month_spent=Decimal("0.0436"))

    refusal = error_of(api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json"))

    assert news.json()["message"] == "The monthly cap is now 0.050000 credits."
    assert "monthly spend cap of 0.050000 credits" in refusal["message"]
    assert Agent.objects.get(name="dm").last_block == 0
