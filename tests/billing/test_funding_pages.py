"""Budget state in words a person acts on: the games list, the Billing
page, the agents list and an agent's page say whether the game can fund a
send now — one send's hold against the balance and the monthly cap — and
show the way to the fix: a link to it for the studio's operators, whom to
ask for everyone else. A refusal on a page links to Billing."""

import re
from decimal import Decimal
from html import unescape

import pytest

from billing import ledger
from billing.models import Account
from studio.models import Role
from tests.conftest import page_user

JSON = {"HTTP_X_REQUESTED_WITH": "fetch", "HTTP_ACCEPT": "application/json"}
# The demo's dm: one send holds 16,000 tokens in and 4,096 out at the
# scripted model's prices, 0.064768 credits.
HOLD = Decimal("0.064768")


@pytest.fixture
def dm(define):
    return define("dm", system_prompt="You are the dungeon master.", max_tokens=16000)


@pytest.fixture
def staff(client, game):
    user = page_user("sam", game, role=Role.DESIGNER)
    user.is_staff = True
    user.save()
    client.force_login(user)
    return client


def cap_nearly_spent(game) -> None:
    """The issue's game: a 0.05 cap with 0.0436 spent — 87% of it, and too
    little left for one send."""
    Account.objects.filter(game=game).update(
        monthly_cap=Decimal("0.05"), month=ledger.this_month(), month_spent=Decimal("0.0436")
    )


def funding_notice(html: str) -> str:
    match = re.search(r'<div class="notice funding[^"]*" data-funding="(\w+)"[^>]*>(.*?)</div>', html, re.S)
    assert match, "no funding notice"
    return match.group(1) + ": " + re.sub(r"\s+", " ", unescape(match.group(2))).strip()


def test_the_hold_the_pages_speak_of_is_the_one_a_send_takes(dm, game):
    assert ledger.hold_estimate(max_tokens=16000, price=ledger.model_price("scripted")) == HOLD


def test_a_cap_that_leaves_less_than_one_send_reads_as_refused_not_87_percent(designer, dm, game):
    cap_nearly_spent(game)

    html = designer.get("/studio/ashmere/billing/").content.decode()

    notice = funding_notice(html)
    assert notice.startswith("none: <strong>Sends are refused.</strong>")
    assert (
        "A send to dm holds up to 0.065 credits (its model call's worst case), more than the 0.0064" in notice
    )
    assert "monthly cap of 0.05 leaves the game 'ashmere' this month" in notice
    assert "Only the studio’s operators (its staff users) raise the monthly cap: ask them." in notice
    assert 'class="bar-fill over"' in html
    assert "0.0064</span> left: too little for any agent’s send" in html


def test_staff_get_a_link_to_the_fix_on_billing(staff, dm, game):
    cap_nearly_spent(game)

    html = staff.get("/studio/ashmere/billing/").content.decode()

    assert (
        '<a href="/studio/ashmere/billing/#monthly-cap" data-fix>Raise the monthly cap on Billing</a>' in html
    )
    assert 'id="monthly-cap"' in html


def test_a_balance_that_cannot_fund_one_send_says_so(designer, dm, game):
    Account.objects.filter(game=game).update(balance=Decimal("0.05"))

    html = designer.get("/studio/ashmere/billing/").content.decode()

    assert "too little for any agent’s send" in html
    notice = funding_notice(html)
    assert (
        "A send to dm holds up to 0.065 credits (its model call's worst case), more than the 0.05" in notice
    )
    assert "the game 'ashmere' has available" in notice
    assert "add credits: ask them for a top-up" in notice


def test_a_game_that_can_fund_its_sends_says_so_too(designer, dm, game):
    html = designer.get("/studio/ashmere/billing/").content.decode()

    notice = funding_notice(html)
    assert notice.startswith("ok: <strong>Sends can be funded.</strong> 100.00 credits are available")
    assert "data-fix" not in notice


def test_the_games_list_says_when_a_game_cannot_pay_for_a_send(staff, dm, game):
    Account.objects.filter(game=game).update(balance=0)

    html = staff.get("/studio/").content.decode()

    card = html[html.index('data-game="ashmere"') :]
    assert "Sends are refused." in card
    assert '<a href="/studio/ashmere/billing/#adjust" data-fix>Add credits on Billing</a>' in card


def test_the_agents_list_says_which_agents_sends_are_refused(designer, dm, define, game):
    define("bard", memory_enabled=False, max_tokens=1000)  # holds 0.034768: less than dm
    Account.objects.filter(game=game).update(balance=Decimal("0.05"))

    html = designer.get("/studio/ashmere/agents/").content.decode()

    assert funding_notice(html).startswith(
        "some: <strong>Some agents’ sends are refused.</strong> Sends to bard can be funded; sends to dm are "
        "refused. A send to dm holds up to 0.065 credits"
    )
    dm_row = html[html.index('<tr data-agent="dm">') :]
    bard_row = html[html.index('<tr data-agent="bard">') : html.index('<tr data-agent="dm">')]
    assert "data-send-refused" in dm_row[: dm_row.index("</tr>")]
    assert "data-send-refused" not in bard_row


def test_the_agents_list_says_nothing_of_money_when_every_send_can_be_funded(designer, dm):
    html = designer.get("/studio/ashmere/agents/").content.decode()

    assert "data-funding" not in html and "data-send-refused" not in html


def test_the_agent_page_says_whether_its_next_send_can_be_funded(designer, dm, game):
    html = designer.get("/studio/ashmere/agents/dm/?fragment=stats").content.decode()
    assert 'data-next-send="funded"' in html
    assert "A send holds up to 0.065 credits; 100.00 are available." in html

    cap_nearly_spent(game)
    html = designer.get("/studio/ashmere/agents/dm/?fragment=stats").content.decode()
    assert 'data-next-send="refused"' in html
    assert "A send holds up to 0.065 credits; the monthly cap leaves 0.0064." in html
    assert '<a href="/studio/ashmere/billing/" data-fix>See Billing</a>' in html


# --- a refusal on a page links to Billing -------------------------------------------------------


def test_a_refused_send_on_the_page_links_to_billing_not_to_an_api(designer, staff_client, dm, game):
    Account.objects.filter(game=game).update(balance=0)

    as_designer = designer.post("/studio/ashmere/agents/dm/send/", {"content": "Hello."}, **JSON)
    as_staff = staff_client.post("/studio/ashmere/agents/dm/send/", {"content": "Hello."}, **JSON)

    assert as_designer.status_code == as_staff.status_code == 402
    for answer in (as_designer, as_staff):
        assert "/api/" not in answer.json()["error"]["message"]
    assert as_designer.json()["error"]["link"] == {"href": "/studio/ashmere/billing/", "text": "See Billing"}
    assert as_staff.json()["error"]["link"] == {
        "href": "/studio/ashmere/billing/#adjust",
        "text": "Add credits on Billing",
    }


def test_a_refused_compaction_on_the_page_links_to_billing(designer, dm, send, game):
    send("I knock.")
    send("I wait.")
    Account.objects.filter(game=game).update(balance=0)

    answer = designer.post("/studio/ashmere/agents/dm/compact/", **JSON)

    assert answer.status_code == 402
    assert answer.json()["error"]["link"]["href"] == "/studio/ashmere/billing/"


@pytest.fixture
def staff_client(game):
    from django.test import Client

    user = page_user("sam", game, role=Role.DESIGNER)
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    return client
