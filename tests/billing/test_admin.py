"""Accounts in the Django admin, as a superuser: the page changes nothing
itself — the monthly cap goes through the ledger — so saving it while a
turn is charged keeps the charge."""

from decimal import Decimal

import pytest
from django.db import connection

from billing import ledger
from billing.admin import AccountAdmin
from billing.models import Account, Adjustment, CostLine
from studio.models import Role
from tests.support.sending import turn_send

from ..conftest import in_thread, page_user


def change_url(game) -> str:
    return f"/admin/billing/account/{Account.objects.get(game=game).pk}/change/"


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor == "sqlite",
    reason="SQLite has one writer: the turn cannot charge while the admin's save holds the file",
)
def test_saving_an_account_while_a_turn_is_charged_keeps_the_charge(admin_client, agent, game, monkeypatch):
    url = change_url(game)
    assert admin_client.get(url).status_code == 200
    # The charge commits after the admin has read the account for the post,
    # before it writes: the moment a page that saved what it loaded would
    # put the old balance back.
    read = AccountAdmin.get_object

    def read_then_charge(self, request, object_id, from_field=None):
        account = read(self, request, object_id, from_field)
        if request.method == "POST":
            thread, box = in_thread(turn_send, agent=agent, content="hello")
            thread.join(15)
            assert box["result"].status == "completed", box
        return account

    monkeypatch.setattr(AccountAdmin, "get_object", read_then_charge)

    response = admin_client.post(url, {"monthly_cap": "50.000000"})

    assert response.status_code == 302, response.content[:2000]
    account = Account.objects.get(game=game)
    charged = sum(CostLine.objects.filter(game=game).values_list("amount", flat=True))
    assert charged > 0
    assert account.balance == Decimal(100) - charged
    assert account.monthly_cap == Decimal(50)
    assert all(check.is_consistent for check in ledger.ledger_check())


def test_the_balance_and_holds_are_not_taken_from_the_account_form(admin_client, game):
    response = admin_client.post(
        change_url(game), {"monthly_cap": "", "balance": "1000000", "held": "5", "month_spent": "0"}
    )

    assert response.status_code == 302
    account = Account.objects.get(game=game)
    assert (account.balance, account.held, account.monthly_cap) == (Decimal(100), Decimal(0), None)


def test_accounts_are_neither_added_nor_deleted_in_the_admin(admin_client, game):
    url = change_url(game)

    assert admin_client.get("/admin/billing/account/add/").status_code == 403
    assert admin_client.post(url.replace("/change/", "/delete/"), {"post": "yes"}).status_code == 403
    assert Account.objects.filter(game=game).exists()


def test_staff_raise_and_remove_the_cap_and_set_the_low_balance_alert_in_the_admin(admin_client, game):
    ledger.limits_set(game=game, monthly_cap=20)

    raised = admin_client.post(change_url(game), {"monthly_cap": "500", "low_balance_alert": "12.5"})
    assert raised.status_code == 302, raised.content[:2000]
    account = Account.objects.get(game=game)
    assert (account.monthly_cap, account.low_balance_alert) == (Decimal(500), Decimal("12.5"))

    removed = admin_client.post(change_url(game), {"monthly_cap": "", "low_balance_alert": ""})
    assert removed.status_code == 302
    account = Account.objects.get(game=game)
    assert (account.monthly_cap, account.low_balance_alert) == (None, None)


def test_a_game_admin_who_is_not_staff_adds_no_adjustment_in_the_admin(client, game):
    client.force_login(page_user("ines", game, role=Role.ADMIN))

    response = client.post(
        "/admin/billing/adjustment/add/", {"game": game.pk, "amount": "1000000", "reason": "mine"}
    )

    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert ledger.balance(game) == 100
    assert not Adjustment.objects.filter(reason="mine").exists()


def test_the_accounts_list_shows_amounts_short_with_the_exact_figure_on_hover(admin_client, game):
    ledger.adjustment_post(game=game, amount=Decimal("-0.033054"), reason="A few turns", made_by="t")

    html = admin_client.get("/admin/billing/account/").content.decode()

    assert '<span class="amount" title="99.966946 credits">99.97</span>' in html
    assert ">99.966946<" not in html


def test_the_accounts_list_puts_the_game_closest_to_running_out_first(admin_client, game, other_game):
    """An admin adjusting budgets starts at the top: the account with the
    least available (its balance less what its turns hold) comes first,
    whatever the games are called or when they were made."""
    ledger.adjustment_post(game=other_game, amount=Decimal("500"), reason="Topped up", made_by="t")
    Account.objects.filter(game=game).update(held=Decimal("60"))  # 100 less 60 held: 40 left
    for newest_first in (True, False):  # neither the default order nor its reverse puts it first by chance
        if not newest_first:
            Account.objects.filter(game=game).update(held=Decimal("0"))
            Account.objects.filter(game=other_game).update(held=Decimal("560"))

        html = admin_client.get("/admin/billing/account/").content.decode()

        urgent, other = (game, other_game) if newest_first else (other_game, game)
        assert html.index(f">{urgent.name}<") < html.index(f">{other.name}<")


def test_a_column_of_the_accounts_list_sorts_it(admin_client, game, other_game):
    ledger.adjustment_post(game=other_game, amount=Decimal("500"), reason="Topped up", made_by="t")

    # The Balance column (list_display[2]), highest first.
    html = admin_client.get("/admin/billing/account/?o=-2").content.decode()

    assert html.index(f">{other_game.name}<") < html.index(f">{game.name}<")
