"""One money format wherever a person reads an amount: two decimals (below
0.1, two significant digits), thousands grouped, the exact figure on hover
— the compaction table, the billing cards, adjustments, the games list, and
the sentences the pages and the ledger write."""

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
SHOWN = re.compile(
    r'^<span class="amount" title="[+-]?\d+\.\d{6} credits">[+-]?\d{1,3}(,\d{3})*\.\d{2,6}</span>$'
)


@pytest.fixture
def staff(client, game):
    user = page_user("sam", game, role=Role.DESIGNER)
    user.is_staff = True
    user.save()
    client.force_login(user)
    return client


def cells(html: str, selector_start: str) -> list[str]:
    """What each `<td class="num">` after `selector_start` holds."""
    part = html[html.index(selector_start) :]
    return [text.strip() for text in re.findall(r'<td class="num[^"]*"[^>]*>(.*?)</td>', part, re.S)]


def shown(cell: str) -> str:
    """The text a reader sees of a cell (the exact figure is its title)."""
    return re.sub(r"<[^>]+>", "", cell)


def test_the_compaction_tables_cost_reads_short_with_the_exact_figure_on_hover(
    designer, agent, send, django_capture_on_commit_callbacks
):
    for words in ("I knock.", "I wait.", "I listen."):
        send(words)
    with django_capture_on_commit_callbacks(execute=True):
        assert designer.post("/studio/ashmere/agents/dm/compact/", **JSON).status_code == 202

    html = designer.get("/studio/ashmere/agents/dm/?fragment=compactions").content.decode()

    (cost,) = cells(html, "compactions-table")
    assert SHOWN.match(cost), cost


def test_a_cost_summed_by_sqlite_reads_the_same_too():
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

    assert cells(html, "compactions-table") == ['<span class="amount" title="0.004374 credits">0.0044</span>']


def test_held_reads_as_every_other_card_does(designer, game):
    Account.objects.filter(game=game).update(held=Decimal("0.5"))

    html = designer.get("/studio/ashmere/billing/").content.decode()

    assert 'data-held><span class="amount" title="0.500000 credits">0.50</span><' in html
    assert 'data-balance><span class="amount" title="100.000000 credits">100.00</span><' in html


def test_an_adjustment_reads_signed_with_grouped_thousands(staff, game):
    staff.post("/studio/ashmere/billing/adjustments/", {"amount": "1000", "reason": "Playtest"}, **JSON)

    html = staff.get("/studio/ashmere/billing/?fragment=adjustments").content.decode()

    amounts = cells(html, "adjustments-table")
    assert [shown(cell) for cell in amounts] == ["+1,000.00", "+100.00"]  # and the opening credits


def test_the_games_list_reads_the_balance_as_billing_does(designer, game):
    Account.objects.filter(game=game).update(balance=Decimal("1234.5"))

    html = designer.get("/studio/").content.decode()

    assert '<span class="amount" title="1234.500000 credits">1,234.50</span>' in html


def test_a_cap_reads_the_same_in_the_pages_news_and_in_the_refusal(admin, api, agent, game):
    news = admin.post("/studio/ashmere/billing/limits/", {"monthly_cap": "0.05", "cap": "set"}, **JSON)
    Account.objects.filter(game=game).update(month=ledger.this_month(), month_spent=Decimal("0.0436"))

    refusal = error_of(api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json"))

    assert news.json()["message"] == "The monthly cap is now 0.05 credits."
    assert "monthly cap of 0.05 leaves" in refusal["message"]
    assert Agent.objects.get(name="dm").last_block == 0
