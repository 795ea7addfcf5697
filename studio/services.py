"""Writes: a new game, with its account and a first admin key."""

from django.db import transaction

from billing.ledger import account_open

from .auth.keys import apikey_create
from .models import Game, Role


@transaction.atomic
def game_open(*, slug: str, name: str = "", credits=0) -> Game:
    """A new game with its account: what every way of making a game does."""
    game = Game.objects.create(slug=slug, name=name or slug)
    account_open(game=game, credits=credits)
    return game


@transaction.atomic
def game_create(*, slug: str, name: str = "", credits=0) -> tuple[Game, str]:
    """A new game with its account and a first admin key (its text returned)."""
    game = game_open(slug=slug, name=name, credits=credits)
    _, text = apikey_create(game=game, role=Role.ADMIN, label="first admin key")
    return game, text
