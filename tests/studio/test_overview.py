"""A game's overview at /studio/<game>/, the page a designer opens first:
its agents with their last activity, this month's spend against the cap,
whether sends can be funded, the turns live now, what failed lately."""

import re
from decimal import Decimal

import pytest

from agents.models import Turn, TurnStatus
from agents.sending.turn_slot import turn_cancel
from billing import ledger
from billing.models import Account
from tests.conftest import UNTIL_CANCELLED, assert_sends_to_sign_in, in_thread, script, wait_for
from tests.support.sending import turn_send

URL = "/studio/ashmere/"


def text(response) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def test_it_needs_a_member_of_the_game(client, outsider_client, game):
    assert_sends_to_sign_in(client, URL)
    assert outsider_client.get(URL).status_code == 404


def test_it_lists_the_agents_newest_activity_first(designer, define):
    dm, bard = define("dm"), define("bard")
    define("innkeeper")
    turn_send(agent=dm, content="I knock.")
    turn_send(agent=bard, content="Sing.")
    turn_send(agent=bard, content=script({"fail": "The model went quiet."}))

    html = designer.get(URL).content.decode()

    assert re.findall(r'data-overview-agent="([^"]+)"', html) == ["bard", "dm", "innkeeper"]
    row = html[html.index('data-overview-agent="bard"') :]
    assert "block 2" in row[: row.index("</tr>")] and "failed" in row[: row.index("</tr>")]


def test_it_shows_this_months_spend_against_the_cap(designer, agent, game):
    Account.objects.filter(game=game).update(
        monthly_cap=Decimal("10"), month=ledger.this_month(), month_spent=Decimal("2.5")
    )

    page = text(designer.get(URL))

    assert "2.50 of a 10.00 monthly cap 25%" in page


def test_it_says_whether_sends_can_be_funded(designer, agent, game):
    assert "Sends can be funded." in text(designer.get(URL))

    Account.objects.filter(game=game).update(balance=0)

    page = text(designer.get(URL))
    assert "Sends are refused." in page
    assert "ask them for a top-up. See Billing" in page


@pytest.mark.django_db(transaction=True)
def test_it_shows_the_turns_live_now(designer, agent):
    thread, _ = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    running = Turn.objects.get(agent=agent, status=TurnStatus.RUNNING)

    html = designer.get(URL).content.decode()
    turn_cancel(running)  # woken at once
    thread.join(30)

    assert f'data-live-turn="{running.uuid}"' in html
    assert "Turns live now 1" in " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_it_shows_recent_failures_with_why(designer, agent):
    turn_send(agent=agent, content="Fine.")
    turn_send(agent=agent, content=script({"fail": "The model went quiet."}))

    html = designer.get(URL).content.decode()

    failures = html[html.index('data-overview="failures"') :]
    assert failures.count("data-failure=") == 1
    assert "The model went quiet." in failures
    assert 'href="/studio/ashmere/agents/dm/blocks/2/"' in failures


def test_a_game_with_nothing_yet_says_so(designer, game):
    page = text(designer.get(URL))

    assert "No agents yet" in page and "Nothing failed lately." in page and "No turn is running" in page
