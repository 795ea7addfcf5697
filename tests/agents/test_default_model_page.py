"""The game's default model on its Agents list: everyone in the game sees it
and where it comes from; the game's admins and the studio's staff set it."""

import re
from decimal import Decimal

import pytest

from billing.models import ModelPrice
from studio.models import Game, Role

from ..conftest import page_user

LIST = "/studio/ashmere/agents/"
SET = "/studio/ashmere/default-model/"


def html(response) -> str:
    return response.content.decode()


def default_of(game) -> str:
    return Game.objects.get(pk=game.pk).default_model


@pytest.fixture
def priced():
    ModelPrice.objects.create(
        model="openai:gpt-4o-mini", input_per_mtok=Decimal("1"), output_per_mtok=Decimal("4")
    )


@pytest.fixture
def staff(client, game):
    """A staff user who is a designer of the game: staff set it all the same."""
    user = page_user("sol", game, role=Role.DESIGNER)
    user.is_staff = True
    user.save()
    client.force_login(user)
    return client


def test_the_list_shows_the_default_model_and_where_it_comes_from(designer, game):
    page = html(designer.get(LIST))

    section = re.search(r'<section[^>]*id="default-model".*?</section>', page, re.S).group(0)
    assert "<code>scripted</code>" in section
    assert "the studio's default" in section


def test_the_list_shows_the_games_own_default_when_it_has_one(designer, game, priced):
    Game.objects.filter(pk=game.pk).update(default_model="openai:gpt-4o-mini")

    section = re.search(r'id="default-model".*?</section>', html(designer.get(LIST)), re.S).group(0)

    assert "<code>openai:gpt-4o-mini</code>" in section
    assert "this game's default" in section


def test_a_designer_sees_the_default_but_no_form_to_change_it(designer, game):
    section = re.search(r'id="default-model".*?</section>', html(designer.get(LIST)), re.S).group(0)

    assert f'action="{SET}"' not in section
    assert "Only the game's admins and the studio's staff change it." in section


@pytest.mark.parametrize("who", ["admin", "staff"])
def test_the_games_admins_and_the_studios_staff_set_it(request, game, priced, who):
    client = request.getfixturevalue(who)
    assert f'action="{SET}"' in html(client.get(LIST))

    response = client.post(SET, {"default_model": "openai:gpt-4o-mini"})

    assert response.status_code == 302
    assert response["Location"] == LIST
    assert default_of(game) == "openai:gpt-4o-mini"
    assert "New agents that name no model now run on openai:gpt-4o-mini." in html(client.get(LIST))


def test_a_blank_model_gives_the_game_the_studios_default_again(admin, game):
    Game.objects.filter(pk=game.pk).update(default_model="scripted")

    response = admin.post(SET, {"default_model": "  "})

    assert response.status_code == 302
    assert default_of(game) == ""


def test_a_designer_may_not_set_it(designer, game):
    response = designer.post(SET, {"default_model": "scripted"})

    assert response.status_code == 403
    assert default_of(game) == ""


def test_someone_outside_the_game_gets_404(outsider_client, game):
    response = outsider_client.post(SET, {"default_model": "scripted"})

    assert response.status_code == 404
    assert default_of(game) == ""


def test_it_takes_only_posts(admin):
    assert admin.get(SET).status_code == 405


def test_a_model_without_a_price_is_refused_next_to_the_field(admin, game):
    response = admin.post(SET, {"default_model": "openai:gpt-x"})

    assert response.status_code == 400
    section = re.search(r'id="default-model".*?</section>', html(response), re.S).group(0)
    assert re.search(r'name="default_model"[^>]*value="openai:gpt-x"[^>]*aria-invalid="true"', section)
    assert "The model &#x27;openai:gpt-x&#x27; has no price of its own" in section
    assert default_of(game) == ""


def test_an_unknown_model_is_refused(admin, game):
    response = admin.post(SET, {"default_model": "gpt-4o"})

    assert response.status_code == 400
    assert "Unknown model &#x27;gpt-4o&#x27;" in html(response)
    assert default_of(game) == ""


def test_a_post_needs_the_csrf_token(game):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(page_user("ines", game, role=Role.ADMIN))

    assert client.post(SET, {"default_model": "scripted"}).status_code == 403
    assert default_of(game) == ""
