"""A definition without `model` gets the game's default model, else the
studio's (STUDIO_DEFAULT_MODEL), else `scripted` where it is offered — and
with none of them it is refused, saying to name a model or set a default.
Through the API's PUT, an import, and the studio's new-agent form."""

from decimal import Decimal

import pytest

from agents.models import Agent, AgentRevision
from billing.models import ModelPrice
from studio.models import Game
from tests.support.agent_file import agent_file, exported

from ..conftest import error_of

DM = "/api/v1/agents/dm"
LIST = "/studio/ashmere/agents/"


def price(model: str) -> ModelPrice:
    return ModelPrice.objects.create(model=model, input_per_mtok=Decimal("1"), output_per_mtok=Decimal("4"))


def put(client, body, name="dm"):
    return client.put(f"/api/v1/agents/{name}", body, format="json")


def game_default(game, model: str) -> None:
    Game.objects.filter(pk=game.pk).update(default_model=model)


@pytest.fixture
def priced():
    for model in ("openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"):
        price(model)


# --- which default -------------------------------------------------------------------------


def test_with_no_default_set_scripted_is_the_default_where_it_is_offered(api):
    response = put(api, {"systemPrompt": "Hi", "memory": {}})

    assert response.status_code == 201
    assert response.json()["model"] == "scripted"


def test_the_studios_default_model_is_taken_when_the_game_has_none(api, priced, studio_conf):
    studio_conf(DEFAULT_MODEL="openai:gpt-4o-mini")

    response = put(api, {"systemPrompt": "Hi", "memory": {}})

    assert response.status_code == 201
    assert response.json()["model"] == "openai:gpt-4o-mini"
    assert Agent.objects.get(name="dm").model == "openai:gpt-4o-mini"


def test_the_games_default_model_comes_before_the_studios(api, game, priced, studio_conf):
    studio_conf(DEFAULT_MODEL="openai:gpt-4o-mini")
    game_default(game, "anthropic:claude-haiku-4-5")

    response = put(api, {"systemPrompt": "Hi"})

    assert response.status_code == 201
    assert response.json()["model"] == "anthropic:claude-haiku-4-5"


def test_a_model_the_definition_names_comes_before_every_default(api, game, priced, studio_conf):
    studio_conf(DEFAULT_MODEL="openai:gpt-4o-mini")
    game_default(game, "anthropic:claude-haiku-4-5")

    response = put(api, {"model": "scripted"})

    assert response.json()["model"] == "scripted"


def test_one_games_default_is_not_anothers(api, outsider, game, priced):
    game_default(game, "openai:gpt-4o-mini")

    assert put(outsider, {}).json()["model"] == "scripted"
    assert put(api, {}).json()["model"] == "openai:gpt-4o-mini"


# --- refusals ------------------------------------------------------------------------------


def test_with_no_default_anywhere_and_scripted_not_offered_a_definition_must_name_its_model(api, studio_conf):
    studio_conf(ALLOW_SCRIPTED_MODEL=False)

    response = put(api, {"systemPrompt": "Hi", "memory": {}})

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_definition"
    assert "names no model" in error["message"]
    assert "PATCH /api/v1/game" in error["message"]
    assert "STUDIO_DEFAULT_MODEL" in error["message"]
    assert response.json()["error"]["details"][0]["field"] == "model"
    assert not Agent.objects.exists()


def test_scripted_is_not_the_default_where_it_is_not_offered_but_a_studio_default_is(
    api, priced, studio_conf
):
    studio_conf(ALLOW_SCRIPTED_MODEL=False, DEFAULT_MODEL="openai:gpt-4o-mini")

    assert put(api, {"systemPrompt": "Hi"}).json()["model"] == "openai:gpt-4o-mini"


def test_a_default_model_that_lost_its_price_is_refused_saying_it_is_the_default(api, game):
    game_default(game, "openai:gpt-x")  # set while it had a price, say

    response = put(api, {"systemPrompt": "Hi"})

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_definition"
    assert "names no model, so it gets the game's default, 'openai:gpt-x'" in error["message"]
    assert "The model 'openai:gpt-x' has no price of its own" in error["message"]
    assert not Agent.objects.exists()


def test_a_studio_default_without_a_price_is_refused_naming_the_setting(api, studio_conf):
    studio_conf(DEFAULT_MODEL="openai:gpt-x")

    response = put(api, {"systemPrompt": "Hi"})

    assert response.status_code == 400
    assert "the studio's default (STUDIO_DEFAULT_MODEL), 'openai:gpt-x'" in error_of(response)["message"]


# --- redefining, and what the agent shows -----------------------------------------------------


def test_redefining_without_a_model_takes_the_default_as_it_is_now(api, game, priced):
    put(api, {"systemPrompt": "Hi"})
    game_default(game, "openai:gpt-4o-mini")

    response = put(api, {"systemPrompt": "Hi"})

    assert response.status_code == 200
    assert response.json()["model"] == "openai:gpt-4o-mini"
    revisions = AgentRevision.objects.filter(agent__name="dm").order_by("number")
    assert [revision.model for revision in revisions] == ["scripted", "openai:gpt-4o-mini"]


def test_an_agent_keeps_its_model_when_the_default_changes_until_it_is_redefined(api, game, priced):
    put(api, {"systemPrompt": "Hi"})

    game_default(game, "openai:gpt-4o-mini")

    assert api.get(DM).json()["model"] == "scripted"


def test_the_agent_shows_the_model_it_runs_on_never_null(api, game, priced):
    game_default(game, "openai:gpt-4o-mini")
    put(api, {"systemPrompt": "Hi"})

    listed = api.get("/api/v1/agents").json()["agents"]
    one = api.get(DM).json()

    assert [agent["model"] for agent in listed] == ["openai:gpt-4o-mini"]
    assert one["model"] == "openai:gpt-4o-mini"
    assert exported(api.get(f"{DM}/export"))["config"]["model"] == "openai:gpt-4o-mini"


def test_taking_the_default_reads_nothing_more_than_naming_the_model(api, game, priced):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    game_default(game, "openai:gpt-4o-mini")
    put(api, {"model": "openai:gpt-4o-mini"})

    with CaptureQueriesContext(connection) as named:
        put(api, {"model": "openai:gpt-4o-mini", "systemPrompt": "One"})
    with CaptureQueriesContext(connection) as defaulted:
        put(api, {"systemPrompt": "Two"})

    assert len(defaulted) == len(named)


# --- an import ----------------------------------------------------------------------------


def test_an_agent_file_whose_config_names_no_model_imports_on_the_games_default(admin_api, game, priced):
    game_default(game, "openai:gpt-4o-mini")

    response = admin_api.post("/api/v1/agents/import", agent_file("archivist"), format="json")

    assert response.status_code == 201, response.content
    assert response.json()["model"] == "openai:gpt-4o-mini"


def test_an_agent_file_without_a_model_where_there_is_no_default_is_refused(admin_api, studio_conf):
    studio_conf(ALLOW_SCRIPTED_MODEL=False)

    response = admin_api.post("/api/v1/agents/import", agent_file("archivist"), format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_agent_file"
    assert "names no model" in error_of(response)["message"]
    assert not Agent.objects.exists()


# --- the studio's new-agent form --------------------------------------------------------------

FORM = {
    "name": "innkeeper",
    "system_prompt": "You keep the inn.",
    "model": "",
    "compaction_type": "summarize",
    "max_tokens": "32000",
}


def test_a_new_agent_from_the_list_with_no_model_gets_the_games_default(designer, game, priced):
    game_default(game, "openai:gpt-4o-mini")

    response = designer.post(LIST, FORM)

    assert response.status_code == 302
    assert Agent.objects.get(name="innkeeper").model == "openai:gpt-4o-mini"


def test_the_new_agent_form_says_what_a_blank_model_gets(designer, game, priced):
    game_default(game, "openai:gpt-4o-mini")

    page = designer.get(LIST).content.decode()

    assert 'name="model"' in page
    assert 'placeholder="openai:gpt-4o-mini"' in page
    assert "Leave it blank for the game's default" in page


def test_a_new_agent_with_no_model_and_no_default_is_refused_next_to_the_model_field(
    designer, game, studio_conf
):
    studio_conf(ALLOW_SCRIPTED_MODEL=False)

    response = designer.post(LIST, FORM)

    assert response.status_code == 400
    page = response.content.decode()
    assert 'name="model"' in page
    assert "names no model" in page
    assert "data-definition-error" not in page
    assert not Agent.objects.exists()
