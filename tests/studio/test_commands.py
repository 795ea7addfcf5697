"""The management commands scripts and operators use: creategame,
createapikey, grantgame. Each key they print must work on the API."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from agents.models import Agent
from billing import ledger
from studio.models import Game, Membership, Role
from tests.conftest import client_for


def run(*args) -> str:
    """Run a command; returns the last line of its stdout."""
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue().strip().splitlines()[-1]


# --- creategame ----------------------------------------------------------------------


def test_creategame_prints_a_working_admin_key_and_opens_the_account(db):
    key = run("creategame", "saltmarsh", "--credits", "250")

    client = client_for(key)
    billing = client.get("/api/v1/billing")
    capped = client.put("/api/v1/billing/limits", {"monthlyCap": "100"}, format="json")
    assert billing.status_code == 200
    assert billing.json()["balance"] == "250.000000"
    assert capped.status_code == 200  # only an admin key may set the cap
    assert ledger.balance(Game.objects.get(slug="saltmarsh")) == 250


def test_creategame_without_credits_opens_an_empty_account(db):
    key = run("creategame", "saltmarsh")

    assert client_for(key).get("/api/v1/billing").json()["balance"] == "0.000000"


def test_creategame_refuses_a_slug_that_exists(game):
    with pytest.raises(CommandError, match="already exists"):
        run("creategame", game.slug, "--credits", "5")

    assert Game.objects.filter(slug=game.slug).count() == 1
    assert ledger.balance(game) == 100


def test_creategame_refuses_credits_that_are_not_a_number(db):
    with pytest.raises(CommandError, match="--credits"):
        run("creategame", "saltmarsh", "--credits", "lots")

    assert not Game.objects.filter(slug="saltmarsh").exists()


def test_the_key_creategame_prints_belongs_to_that_game_only(agent):
    key = run("creategame", "saltmarsh")

    response = client_for(key).get("/api/v1/agents/dm")

    assert response.status_code == 404


# --- createapikey --------------------------------------------------------------------


def test_createapikey_prints_a_working_designer_key(game, agent):
    key = run("createapikey", game.slug, "--role", "designer")

    client = client_for(key)
    read = client.get("/api/v1/agents/dm")
    deleted = client.delete("/api/v1/agents/dm")
    assert read.status_code == 200
    assert deleted.status_code == 403
    assert Agent.objects.filter(pk=agent.pk).exists()


def test_createapikey_makes_an_admin_key_when_asked(game, agent):
    key = run("createapikey", game.slug, "--role", "admin")

    response = client_for(key).delete("/api/v1/agents/dm")

    assert response.status_code == 204


def test_createapikey_makes_a_new_key_each_time(game):
    first = run("createapikey", game.slug)
    second = run("createapikey", game.slug)

    assert first != second
    assert client_for(first).get("/api/v1/agents").status_code == 200
    assert client_for(second).get("/api/v1/agents").status_code == 200


def test_createapikey_refuses_an_unknown_game(db):
    with pytest.raises(CommandError, match="no game 'nowhere'"):
        run("createapikey", "nowhere", "--role", "designer")


# --- grantgame -----------------------------------------------------------------------


@pytest.fixture
def mara(db):
    return get_user_model().objects.create_user("mara", password="a-long-password")


def test_grantgame_lets_a_user_see_a_game_with_a_role(game, mara):
    call_command("grantgame", game.slug, "mara", "--role", "admin", stdout=StringIO())

    membership = Membership.objects.get(user=mara, game=game)
    assert membership.role == Role.ADMIN


def test_grantgame_again_changes_the_role_rather_than_adding_a_membership(game, mara):
    call_command("grantgame", game.slug, "mara", "--role", "admin", stdout=StringIO())

    call_command("grantgame", game.slug, "mara", "--role", "designer", stdout=StringIO())

    assert list(Membership.objects.filter(user=mara).values_list("game__slug", "role")) == [
        (game.slug, Role.DESIGNER)
    ]


def test_grantgame_refuses_an_unknown_game(mara):
    with pytest.raises(CommandError, match="no game 'nowhere'"):
        call_command("grantgame", "nowhere", "mara", "--role", "admin", stdout=StringIO())

    assert not Membership.objects.exists()


def test_grantgame_refuses_an_unknown_user(game):
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("grantgame", game.slug, "nobody", "--role", "admin", stdout=StringIO())

    assert not Membership.objects.exists()
