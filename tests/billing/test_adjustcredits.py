"""`manage.py adjustcredits SLUG AMOUNT --reason TEXT`: the operators' way to
add or take away a game's credits from a script."""

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from billing import ledger
from billing.models import Adjustment


def run(*args) -> str:
    """Run adjustcredits; returns the last line of its stdout."""
    out = StringIO()
    call_command("adjustcredits", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip().splitlines()[-1]


def test_it_adds_credits_prints_the_new_balance_and_keeps_who_and_why(game):
    last_line = run(game.slug, "250.5", "--reason", "Playtest weekend")

    assert last_line == "350.500000"
    assert ledger.balance(game) == Decimal("350.5")
    adjustment = Adjustment.objects.latest("id")
    assert (adjustment.amount, adjustment.reason) == (Decimal("250.5"), "Playtest weekend")
    assert adjustment.made_by.startswith("manage.py adjustcredits")


def test_a_negative_amount_takes_credits_away(game):
    assert run(game.slug, "-40.5", "--reason", "Refund of a test run") == "59.500000"
    assert ledger.balance(game) == Decimal("59.5")


def test_it_moves_only_its_own_games_balance(game, other_game):
    run(other_game.slug, "10", "--reason", "theirs")

    assert (ledger.balance(game), ledger.balance(other_game)) == (100, 110)


def test_an_unknown_game_is_refused(game):
    with pytest.raises(CommandError, match="There is no game 'nowhere'"):
        run("nowhere", "10", "--reason", "x")

    assert Adjustment.objects.count() == 1


@pytest.mark.parametrize(
    ("amount", "says"),
    [
        ("lots", "Enter the amount as a number of credits, like 250 or -10.5."),
        ("NaN", "Enter the amount as a number of credits"),
        ("0", "An adjustment of 0 changes nothing"),
        ("1.0000001", "Credits have at most six decimal places."),
        ("1e30", "That amount is too large."),
    ],
)
def test_a_bad_amount_is_refused_saying_why(game, amount, says):
    with pytest.raises(CommandError, match=f"^AMOUNT: {says}"):
        run(game.slug, amount, "--reason", "x")

    assert ledger.balance(game) == 100
    assert Adjustment.objects.count() == 1


@pytest.mark.parametrize("reason", [[], ["--reason", ""], ["--reason", "   "]])
def test_a_missing_reason_is_refused(game, reason):
    with pytest.raises(CommandError, match="--reason: Give a reason: every adjustment is kept with who"):
        run(game.slug, "10", *reason)

    assert ledger.balance(game) == 100
