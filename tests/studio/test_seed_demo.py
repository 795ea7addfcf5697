"""`make run` seeds a demo game whose character has something to show — with
DEBUG on only: its superuser's password is printed in the README — and
prints the same API key every run, kept in a file git ignores."""

import stat
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from agents.models import Agent, Block, Checkpoint
from memories.models import Memory
from studio.auth.keys import apikey_prefix_of, apikey_revoke
from studio.models import ApiKey, Game

from ..conftest import client_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def debug(settings):
    """DJANGO_DEBUG on, as `make run` sets it."""
    settings.DEBUG = True


@pytest.fixture
def seed(tmp_path):
    """seed_demo as `make run` runs it, keeping its key in this test's own
    file; what it printed."""

    def _seed(**options) -> str:
        out = StringIO()
        call_command("seed_demo", key_file=str(tmp_path / ".demo-key"), stdout=out, **options)
        return out.getvalue()

    return _seed


def key_of(printed: str) -> str:
    return printed.split("API key:")[1].split()[0]


@pytest.mark.django_db(transaction=True)
def test_the_demo_has_memories_a_checkpoint_tool_calls_and_a_working_key(debug, seed):
    printed = seed()

    agent = Agent.objects.get(game__slug="demo", name="dm")
    assert Memory.objects.filter(agent=agent, is_open=True).exists()
    assert Memory.objects.filter(agent=agent, is_open=False).exists()
    assert Checkpoint.objects.filter(agent=agent).exists()
    blocks = list(Block.objects.filter(agent=agent))
    assert any(b.folded for b in blocks) and any(not b.folded for b in blocks)
    assert any(e["type"] == "tool_call" for b in blocks for e in b.entries)
    key = key_of(printed)
    assert client_for(key).get("/api/v1/agents/dm/checkpoint").status_code == 200
    assert "demo / demo-studio" in printed


@pytest.mark.django_db(transaction=True)
def test_seeding_again_keeps_the_story_and_the_key(debug, seed):
    first = seed()
    blocks = Block.objects.count()

    second = seed()

    assert Block.objects.count() == blocks
    assert key_of(first) == key_of(second)
    assert client_for(key_of(first)).get("/api/v1/agents").status_code == 200
    assert ApiKey.objects.filter(label="make run", revoked_at__isnull=True).count() == 1
    assert "new, kept in .demo-key" in first
    assert "kept in .demo-key: the same key every run" in second


@pytest.mark.django_db(transaction=True)
def test_the_kept_key_is_readable_by_its_owner_only_and_git_ignores_it(debug, seed, tmp_path):
    printed = seed()

    kept = tmp_path / ".demo-key"
    assert kept.read_text().strip() == key_of(printed)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    ignored = subprocess.run(["git", "check-ignore", "-q", ".demo-key"], cwd=ROOT)
    assert ignored.returncode == 0, ".gitignore must list .demo-key"


@pytest.mark.django_db(transaction=True)
def test_a_kept_key_that_no_longer_works_is_replaced_saying_so(debug, seed, tmp_path):
    old_key = key_of(seed())
    apikey_revoke(prefix=apikey_prefix_of(old_key))

    printed = seed()

    new_key = key_of(printed)
    assert new_key != old_key
    assert client_for(new_key).get("/api/v1/agents").status_code == 200
    assert (tmp_path / ".demo-key").read_text().strip() == new_key
    assert "new, kept in .demo-key" in printed


@pytest.mark.django_db(transaction=True)
def test_without_its_file_a_new_key_replaces_the_last_one_saying_so(debug, seed, tmp_path):
    old_key = key_of(seed())
    (tmp_path / ".demo-key").unlink()

    printed = seed()

    new_key = key_of(printed)
    assert client_for(old_key).get("/api/v1/agents").status_code == 401
    assert client_for(new_key).get("/api/v1/agents").status_code == 200
    assert ApiKey.objects.filter(label="make run", revoked_at__isnull=True).count() == 1
    assert "new: the demo key an earlier run printed is revoked" in printed


@pytest.mark.django_db(transaction=True)
def test_without_debug_it_refuses_naming_the_setting_and_makes_nothing(settings):
    settings.DEBUG = False  # the scripted model stays allowed: DEBUG alone decides

    with pytest.raises(CommandError, match=r"DJANGO_DEBUG=true.*`make run`"):
        call_command("seed_demo", stdout=StringIO())

    assert not Game.objects.filter(slug="demo").exists()
    assert not get_user_model().objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_prints_the_address_the_studio_runs_on(debug, seed):
    printed = seed(url="http://127.0.0.1:8123")

    assert "The studio is starting on http://127.0.0.1:8123" in printed
    assert "8000" not in printed


@pytest.mark.django_db(transaction=True)
def test_the_real_models_the_docs_name_can_be_defined_on_the_demo(debug, seed):
    key = key_of(seed())

    for model in ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"):
        body = {"model": model, "systemPrompt": "You are the innkeeper.", "memory": {}}
        response = client_for(key).put("/api/v1/agents/innkeeper", body, format="json")
        assert response.status_code in (200, 201), response.json()
