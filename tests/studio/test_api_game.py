"""GET and PATCH /api/v1/game: the key's game, and the model its agents get
when their definition names none (the game's own default, else the
studio's)."""

from decimal import Decimal

import pytest

from billing.models import ModelPrice
from studio.models import Game

from ..conftest import error_of

GAME = "/api/v1/game"


def price(model: str) -> ModelPrice:
    return ModelPrice.objects.create(model=model, input_per_mtok=Decimal("1"), output_per_mtok=Decimal("4"))


def patch(client, body):
    return client.patch(GAME, body, format="json")


# --- GET ----------------------------------------------------------------------------------


def test_it_shows_the_keys_game_and_the_model_a_definition_without_one_gets(api, game):
    response = api.get(GAME)

    assert response.status_code == 200
    assert response.json() == {
        "slug": "ashmere",
        "name": "ashmere",
        "defaultModel": None,
        "studioDefaultModel": "scripted",
        "effectiveDefaultModel": "scripted",
    }


def test_it_shows_the_studios_default_model_when_the_setting_names_one(api, studio_conf):
    studio_conf(DEFAULT_MODEL="openai:gpt-4o-mini")

    body = api.get(GAME).json()

    assert (body["defaultModel"], body["studioDefaultModel"], body["effectiveDefaultModel"]) == (
        None,
        "openai:gpt-4o-mini",
        "openai:gpt-4o-mini",
    )


def test_with_no_default_anywhere_and_scripted_not_offered_nothing_is_the_default(api, studio_conf):
    studio_conf(ALLOW_SCRIPTED_MODEL=False)

    body = api.get(GAME).json()

    assert (body["studioDefaultModel"], body["effectiveDefaultModel"]) == (None, None)


def test_the_games_own_default_comes_before_the_studios(api, game, studio_conf):
    studio_conf(DEFAULT_MODEL="openai:gpt-4o-mini")
    Game.objects.filter(pk=game.pk).update(default_model="anthropic:claude-haiku-4-5")

    body = api.get(GAME).json()

    assert body["defaultModel"] == "anthropic:claude-haiku-4-5"
    assert body["studioDefaultModel"] == "openai:gpt-4o-mini"
    assert body["effectiveDefaultModel"] == "anthropic:claude-haiku-4-5"


def test_another_games_key_sees_only_its_own_game(outsider, game):
    Game.objects.filter(pk=game.pk).update(default_model="openai:gpt-4o-mini")

    body = outsider.get(GAME).json()

    assert body["slug"] == "elsewhere"
    assert body["defaultModel"] is None


def test_reading_the_game_costs_no_query_beyond_the_key(api, django_assert_num_queries):
    api.get(GAME)  # the connection's own set-up statements, once

    with django_assert_num_queries(1):  # the key, with its game
        assert api.get(GAME).status_code == 200


# --- PATCH --------------------------------------------------------------------------------


def test_an_admin_key_sets_the_games_default_model(admin_api, api, game):
    price("openai:gpt-4o-mini")

    response = patch(admin_api, {"defaultModel": "openai:gpt-4o-mini"})

    assert response.status_code == 200
    assert response.json()["defaultModel"] == "openai:gpt-4o-mini"
    assert response.json()["effectiveDefaultModel"] == "openai:gpt-4o-mini"
    assert Game.objects.get(pk=game.pk).default_model == "openai:gpt-4o-mini"
    assert api.get(GAME).json() == response.json()


def test_null_gives_the_game_the_studios_default_again(admin_api, game, studio_conf):
    studio_conf(DEFAULT_MODEL="anthropic:claude-x", ALLOW_UNPRICED_MODELS=True)
    Game.objects.filter(pk=game.pk).update(default_model="openai:gpt-4o-mini")

    response = patch(admin_api, {"defaultModel": None})

    assert response.status_code == 200
    assert response.json()["defaultModel"] is None
    assert response.json()["effectiveDefaultModel"] == "anthropic:claude-x"
    assert Game.objects.get(pk=game.pk).default_model == ""


def test_a_body_without_the_field_changes_nothing(admin_api, game):
    Game.objects.filter(pk=game.pk).update(default_model="scripted")

    response = patch(admin_api, {})

    assert response.status_code == 200
    assert Game.objects.get(pk=game.pk).default_model == "scripted"


def test_a_designer_key_may_not_set_it(api, game):
    response = patch(api, {"defaultModel": "scripted"})

    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"
    assert Game.objects.get(pk=game.pk).default_model == ""


def test_another_games_admin_key_sets_its_own_game_only(outsider, game, other_game):
    response = patch(outsider, {"defaultModel": "scripted"})

    assert response.status_code == 200
    assert response.json()["slug"] == "elsewhere"
    assert Game.objects.get(pk=other_game.pk).default_model == "scripted"
    assert Game.objects.get(pk=game.pk).default_model == ""


@pytest.mark.parametrize("model", ["gpt-4o", "openai:", "mistral:large"])
def test_a_model_no_provider_serves_is_refused_naming_it(admin_api, game, model):
    response = patch(admin_api, {"defaultModel": model})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_definition"
    assert f"Unknown model '{model}'" in error_of(response)["message"]
    assert Game.objects.get(pk=game.pk).default_model == ""


def test_a_model_without_a_price_of_its_own_is_refused_naming_it_and_where_to_price_it(admin_api, game):
    response = patch(admin_api, {"defaultModel": "openai:gpt-x"})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_definition"
    message = error_of(response)["message"]
    assert "The model 'openai:gpt-x' has no price of its own" in message
    assert "/admin/billing/modelprice/" in message
    assert "set it as the game's default again" in message
    assert Game.objects.get(pk=game.pk).default_model == ""


def test_an_unpriced_model_the_studio_allows_is_taken(admin_api, game, studio_conf):
    studio_conf(ALLOW_UNPRICED_MODELS=frozenset({"openai:llama3.1"}))

    assert patch(admin_api, {"defaultModel": "openai:llama3.1"}).status_code == 200
    assert patch(admin_api, {"defaultModel": "openai:gpt-x"}).status_code == 400
    assert Game.objects.get(pk=game.pk).default_model == "openai:llama3.1"


def test_scripted_is_refused_where_it_is_not_offered(admin_api, game, studio_conf):
    studio_conf(ALLOW_SCRIPTED_MODEL=False)

    response = patch(admin_api, {"defaultModel": "scripted"})

    assert response.status_code == 400
    assert "'scripted' model is a test model" in error_of(response)["message"]
    assert Game.objects.get(pk=game.pk).default_model == ""


@pytest.mark.parametrize(
    "body, field",
    [
        ({"defaultModel": 4}, "defaultModel"),
        ({"defaultModel": ""}, "defaultModel"),
        ({"defaultModel": "openai:" + "x" * 200}, "defaultModel"),
        ({"defaultModel": "scripted", "name": "Renamed"}, "name"),
    ],
)
def test_bad_input_is_400_naming_the_field(admin_api, game, body, field):
    response = patch(admin_api, body)

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"
    assert [problem["field"] for problem in response.json()["error"]["details"]] == [field]
    assert Game.objects.get(pk=game.pk).default_model == ""


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_other_methods_are_405(admin_api, method):
    response = getattr(admin_api, method)(GAME, {}, format="json")

    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


@pytest.mark.parametrize("method", ["get", "patch"])
def test_it_needs_a_key(anonymous, game, method):
    response = getattr(anonymous, method)(GAME, {"defaultModel": "scripted"}, format="json")

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"
    assert Game.objects.get(pk=game.pk).default_model == ""
