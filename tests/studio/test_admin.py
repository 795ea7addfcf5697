"""The Django admin as a superuser: a game added there is opened like any
other, keys are made there (shown once) and revoked, and what only the domain
writes (turns, blocks, checkpoints, compactions, cost lines, memories and
their history) is shown and never added, changed or deleted."""

import pytest

from agents.models import Block, Checkpoint, Compaction, CompactionReason, Turn
from billing import ledger
from billing.models import CostLine, ModelPrice
from memories.models import Memory, MemoryEvent
from studio.auth.keys import apikey_create
from studio.models import ApiKey, Game, Role
from tests.support.sending import turn_send

from ..conftest import call, client_for, error_of, quest_checkpoint, script


def test_a_game_added_in_the_admin_opens_its_account_so_its_api_works(admin_client):
    response = admin_client.post(
        "/admin/studio/game/add/",
        {
            "slug": "saltmarsh",
            "name": "Saltmarsh",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )

    assert response.status_code == 302, response.content[:2000]
    game = Game.objects.get(slug="saltmarsh")
    api = client_for(apikey_create(game=game, role=Role.ADMIN)[1])
    billing = api.get("/api/v1/billing")
    assert billing.status_code == 200
    assert billing.json()["balance"] == "0.000000"
    assert api.put("/api/v1/agents/dm", {"memory": {}}, format="json").status_code == 201
    refused = api.post("/api/v1/agents/dm/messages", {"content": "hello"}, format="json")
    assert refused.status_code == 402  # no credits yet: the domain's answer, not a 500
    assert error_of(refused)["code"] == "budget_exhausted"

    admin_client.post("/admin/billing/adjustment/add/", {"game": game.pk, "amount": "10", "reason": "Launch"})
    sent = api.post("/api/v1/agents/dm/messages", {"content": "hello"}, format="json")
    assert sent.status_code == 200
    assert sent.json()["turn"]["status"] == "completed"
    assert all(check.is_consistent for check in ledger.ledger_check())


def test_a_key_revoked_in_the_admin_stops_working(admin_client, game):
    key, text = apikey_create(game=game, role=Role.DESIGNER, label="build server")
    assert client_for(text).get("/api/v1/agents").status_code == 200

    response = admin_client.post(
        f"/admin/studio/apikey/{key.pk}/change/",
        {
            "role": "designer",
            "label": "build server",
            "revoked_at_0": "2026-01-02",
            "revoked_at_1": "10:00:00",
        },
    )

    assert response.status_code == 302, response.content[:2000]
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert client_for(text).get("/api/v1/agents").status_code == 401


def test_a_key_made_in_the_admin_is_shown_once_and_works(admin_client, game):
    response = admin_client.post(
        "/admin/studio/apikey/add/",
        {"game": game.pk, "role": "designer", "label": "build server"},
        follow=True,
    )

    assert response.status_code == 200
    shown = [str(message) for message in response.context["messages"]]
    text = next(m for m in shown if "copy it now" in m).split(" is ")[1].split(" — ")[0]
    assert client_for(text).get("/api/v1/agents").status_code == 200
    key = ApiKey.objects.get(label="build server")
    assert (key.game, key.role) == (game, "designer")
    assert text.split("_", 2)[2] not in key.digest  # only a digest is kept (the secret may hold "_")
    again = admin_client.get(f"/admin/studio/apikey/{key.pk}/change/").content.decode()
    assert text not in again


def game_change(admin_client, game, **fields):
    return admin_client.post(
        f"/admin/studio/game/{game.pk}/change/",
        {
            "slug": game.slug,
            "name": game.name,
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
            **fields,
        },
    )


def test_staff_set_a_games_default_model_in_the_admin_and_its_definitions_get_it(admin_client, game, api):
    ModelPrice.objects.create(model="openai:gpt-4o-mini", input_per_mtok=1, output_per_mtok=4)
    assert "default_model" in admin_client.get(f"/admin/studio/game/{game.pk}/change/").content.decode()

    response = game_change(admin_client, game, default_model="openai:gpt-4o-mini")

    assert response.status_code == 302, response.content[:2000]
    assert Game.objects.get(pk=game.pk).default_model == "openai:gpt-4o-mini"
    assert api.put("/api/v1/agents/dm", {}, format="json").json()["model"] == "openai:gpt-4o-mini"
    assert api.get("/api/v1/game").json()["defaultModel"] == "openai:gpt-4o-mini"


def test_the_admin_refuses_a_default_model_a_definition_could_not_use(admin_client, game):
    response = game_change(admin_client, game, default_model="openai:gpt-x")

    assert response.status_code == 200
    assert "The model &#x27;openai:gpt-x&#x27; has no price of its own" in response.content.decode()
    assert Game.objects.get(pk=game.pk).default_model == ""


def test_a_blank_default_model_in_the_admin_means_the_studios(admin_client, game):
    Game.objects.filter(pk=game.pk).update(default_model="scripted")

    response = game_change(admin_client, game, default_model="")

    assert response.status_code == 302, response.content[:2000]
    assert Game.objects.get(pk=game.pk).default_model == ""


def test_a_game_added_in_the_admin_may_have_a_default_model(admin_client):
    response = admin_client.post(
        "/admin/studio/game/add/",
        {
            "slug": "saltmarsh",
            "name": "Saltmarsh",
            "default_model": "scripted",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )

    assert response.status_code == 302, response.content[:2000]
    assert Game.objects.get(slug="saltmarsh").default_model == "scripted"


# --- rows only the domain writes -------------------------------------------------------------


@pytest.fixture
def played(agent):
    """One of each row only the domain writes."""
    turn_send(
        agent=agent, content=script(call("close_memory", name="quest", description="Now", content="Go."))
    )
    quest_checkpoint(agent, through=1)
    Compaction.objects.create(agent=agent, reason=CompactionReason.MANUAL)
    return agent


DOMAIN_ROWS = [
    ("agents", Turn),
    ("agents", Block),
    ("agents", Checkpoint),
    ("agents", Compaction),
    ("billing", CostLine),
    ("memories", Memory),
    ("memories", MemoryEvent),
]


@pytest.mark.parametrize("app, model", DOMAIN_ROWS, ids=[model.__name__ for _, model in DOMAIN_ROWS])
def test_rows_only_the_domain_writes_cannot_be_changed_or_deleted_in_the_admin(
    admin_client, played, app, model
):
    row = model.objects.first()
    before = model.objects.filter(pk=row.pk).values().get()
    base = f"/admin/{app}/{model._meta.model_name}/"

    assert admin_client.get(f"{base}{row.pk}/change/").status_code == 200  # shown, read-only
    assert admin_client.post(f"{base}{row.pk}/change/", {}).status_code == 403
    assert admin_client.get(f"{base}{row.pk}/delete/").status_code == 403
    assert admin_client.post(f"{base}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.get(f"{base}add/").status_code == 403
    bulk = admin_client.post(base, {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"})
    assert bulk.status_code in (200, 302)
    assert model.objects.filter(pk=row.pk).values().get() == before


def test_the_admin_names_memories_in_english(admin_client):
    index = admin_client.get("/admin/").content.decode()

    assert ">Memories<" in index and "Memorys" not in index


def test_the_price_form_says_what_a_model_is_named_and_what_a_price_is_per(admin_client):
    form = admin_client.get("/admin/billing/modelprice/add/").content.decode()

    assert "with its provider's prefix: openai:gpt-4o-mini" in form
    assert "Input (credits per million tokens)" in form
    assert "Per million tokens, not per token" in form
