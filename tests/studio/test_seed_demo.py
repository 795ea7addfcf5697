"""`make run` seeds a demo game whose character has something to show — with
DEBUG on only: its superuser's password is printed in the README."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from agents.models import Agent, Block, Checkpoint
from memories.models import Memory
from studio.models import ApiKey, Game

from ..conftest import client_for


@pytest.fixture
def debug(settings):
    """DJANGO_DEBUG on, as `make run` sets it."""
    settings.DEBUG = True


@pytest.mark.django_db(transaction=True)
def test_the_demo_has_memories_a_checkpoint_tool_calls_and_a_working_key(debug):
    out = StringIO()

    call_command("seed_demo", stdout=out)

    agent = Agent.objects.get(game__slug="demo", name="dm")
    assert Memory.objects.filter(agent=agent, is_open=True).exists()
    assert Memory.objects.filter(agent=agent, is_open=False).exists()
    assert Checkpoint.objects.filter(agent=agent).exists()
    blocks = list(Block.objects.filter(agent=agent))
    assert any(b.folded for b in blocks) and any(not b.folded for b in blocks)
    assert any(e["type"] == "tool_call" for b in blocks for e in b.entries)
    key = out.getvalue().split("API key:")[1].split()[0]
    assert client_for(key).get("/api/v1/agents/dm/checkpoint").status_code == 200
    assert "demo / demo-studio" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_seeding_again_keeps_the_story_and_prints_a_new_key(debug):
    first, second = StringIO(), StringIO()
    call_command("seed_demo", stdout=first)
    blocks = Block.objects.count()

    call_command("seed_demo", stdout=second)

    assert Block.objects.count() == blocks
    assert (
        first.getvalue().split("API key:")[1].split()[0] != second.getvalue().split("API key:")[1].split()[0]
    )


@pytest.mark.django_db(transaction=True)
def test_seeding_again_revokes_the_key_the_last_run_printed(debug):
    first, second = StringIO(), StringIO()
    call_command("seed_demo", stdout=first)
    old_key = first.getvalue().split("API key:")[1].split()[0]

    call_command("seed_demo", stdout=second)

    new_key = second.getvalue().split("API key:")[1].split()[0]
    assert client_for(old_key).get("/api/v1/agents").status_code == 401
    assert client_for(new_key).get("/api/v1/agents").status_code == 200
    assert ApiKey.objects.filter(label="make run", revoked_at__isnull=True).count() == 1


@pytest.mark.django_db(transaction=True)
def test_without_debug_it_refuses_naming_the_setting_and_makes_nothing(settings):
    settings.DEBUG = False  # the scripted model stays allowed: DEBUG alone decides

    with pytest.raises(CommandError, match=r"DJANGO_DEBUG=true.*`make run`"):
        call_command("seed_demo", stdout=StringIO())

    assert not Game.objects.filter(slug="demo").exists()
    assert not get_user_model().objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_prints_the_address_the_studio_runs_on(debug):
    out = StringIO()

    call_command("seed_demo", url="http://127.0.0.1:8123", stdout=out)

    assert "The studio is starting on http://127.0.0.1:8123" in out.getvalue()
    assert "8000" not in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_the_real_models_the_docs_name_can_be_defined_on_the_demo(debug):
    out = StringIO()
    call_command("seed_demo", stdout=out)
    key = out.getvalue().split("API key:")[1].split()[0]

    for model in ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"):
        body = {"model": model, "systemPrompt": "You are the innkeeper.", "memory": {}}
        response = client_for(key).put("/api/v1/agents/innkeeper", body, format="json")
        assert response.status_code in (200, 201), response.json()
