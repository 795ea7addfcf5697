"""The tests of this folder look at one story (`time_story`: nine blocks,
two checkpoints) played once per module rather than once per test.

The story is committed before the module's first test; each test runs in
a transaction rolled back at its end, so what one writes (a fork, an
import, a send to a copy) is gone for the next. A test here must not be
transactional (its flush would take the story away from the rest) and
must not need a commit, nor send to `dm` (this process keeps an agent's
ended blocks, and would keep one the rollback took away): one that does
belongs with the transactional tests beside this folder, which play a
story of their own. The module's game, key and agent `dm` are the
story's."""

from dataclasses import dataclass

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from agents.models import Agent
from agents.services import AgentDefinition, agent_define
from studio.auth.keys import apikey_create
from studio.models import Game, Role
from studio.services import game_create
from tests.support.time_story import FORCED_CHECKPOINT_BLOCKS, play_messages

from ...conftest import client_for


@dataclass(frozen=True)
class Played:
    game: Game
    admin_key: str
    agent_id: int
    turns: list


@pytest.fixture(scope="module")
def played(django_db_setup, django_db_blocker) -> Played:
    studio = {
        **settings.STUDIO,
        "COMPACTION_RUNNER": "inline",
        "ALLOW_SCRIPTED_MODEL": True,
        "FORCED_CHECKPOINT_BLOCKS": FORCED_CHECKPOINT_BLOCKS,
    }
    with override_settings(STUDIO=studio):
        with django_db_blocker.unblock():
            game, admin_key = game_create(slug="ashmere", credits=100)
            definition = AgentDefinition(memory_enabled=True, system_prompt="You are the dungeon master.")
            agent, _ = agent_define(game=game, name="dm", definition=definition, by=None, via="command")
            designer_key = apikey_create(game=game, role=Role.DESIGNER)[1]
            turns = play_messages(client_for(designer_key))
        try:
            yield Played(game, admin_key, agent.pk, turns)
        finally:
            with django_db_blocker.unblock():
                # As after a transactional test: every table emptied, the
                # migrations' seeded rows put back.
                call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def game_and_key(played):
    return played.game, played.admin_key


@pytest.fixture
def agent(played):
    return Agent.objects.get(pk=played.agent_id)


@pytest.fixture
def story(played):
    return played.turns
