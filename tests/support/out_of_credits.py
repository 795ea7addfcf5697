"""Games whose sends are refused for want of credits, each way the studio
refuses one: no credits left (402 `budget_exhausted`), and the monthly
spend cap reached (402 `spend_cap_reached`)."""

from decimal import Decimal

from django.db import transaction

from billing import ledger
from studio.auth.keys import apikey_create
from studio.models import Role
from studio.services import game_create


def broke_game_key(slug: str = "broke") -> str:
    """A designer key of a game with no credits."""
    game, _ = game_create(slug=slug, credits=0)
    return apikey_create(game=game, role=Role.DESIGNER)[1]


def capped_game_key(slug: str = "capped") -> str:
    """A designer key of a game with credits whose monthly cap leaves no
    room for a send."""
    game, _ = game_create(slug=slug, credits=100)
    with transaction.atomic():
        ledger.limits_set(game=game, monthly_cap=Decimal("0.000001"), by_staff=True)
    return apikey_create(game=game, role=Role.DESIGNER)[1]
