"""No endpoint, page or event leaks across games: a matrix of every API
route and every studio page, tried by someone of another game."""

import uuid

import pytest
from django.test import Client

from agents.replays import replay_start
from tests.support.sending import turn_send

from ..conftest import call, page_user, script

AGENT_API = [
    ("get", "/api/v1/agents/dm"),
    ("delete", "/api/v1/agents/dm"),
    ("post", "/api/v1/agents/dm/messages"),
    ("get", "/api/v1/agents/dm/turns"),
    ("get", "/api/v1/agents/dm/turns/{turn}"),
    ("post", "/api/v1/agents/dm/turns/{turn}/cancel"),
    ("get", "/api/v1/agents/dm/history"),
    ("get", "/api/v1/agents/dm/context"),
    ("get", "/api/v1/agents/dm/checkpoint"),
    ("get", "/api/v1/agents/dm/memories"),
    ("post", "/api/v1/agents/dm/compact"),
    ("get", "/api/v1/agents/dm/compactions"),
    ("get", "/api/v1/agents/dm/memories?atBlock=1"),
    ("get", "/api/v1/agents/dm/memories/secret/history"),
    ("get", "/api/v1/agents/dm/context?atBlock=1"),
    ("get", "/api/v1/agents/dm/checkpoints"),
    ("get", "/api/v1/agents/dm/checkpoints/1"),
    ("post", "/api/v1/agents/dm/fork"),
    ("get", "/api/v1/agents/dm/export"),
    ("get", "/api/v1/agents/dm/replays"),
    ("post", "/api/v1/agents/dm/replays"),
    ("get", "/api/v1/agents/dm/replays/{replay}"),
    ("post", "/api/v1/agents/dm/replays/{replay}/cancel"),
    ("delete", "/api/v1/agents/dm/replays/{replay}"),
]

PAGES = [
    ("get", "/studio/ashmere/"),
    ("get", "/studio/ashmere/agents/"),
    ("get", "/studio/ashmere/agents/dm/"),
    ("get", "/studio/ashmere/agents/dm/?fragment=history"),
    ("get", "/studio/ashmere/agents/dm/memories/"),
    ("get", "/studio/ashmere/agents/dm/?fragment=timeline"),
    ("get", "/studio/ashmere/agents/dm/blocks/1/"),
    ("get", "/studio/ashmere/agents/dm/checkpoints/"),
    ("get", "/studio/ashmere/agents/dm/export/"),
    ("get", "/studio/ashmere/agents/dm/replays/"),
    ("get", "/studio/ashmere/agents/dm/replays/{replay}/"),
    ("get", "/studio/ashmere/agents/dm/replays/{replay}/use/"),
    ("get", "/studio/ashmere/billing/"),
    ("post", "/studio/ashmere/agents/dm/"),
    ("post", "/studio/ashmere/agents/dm/send/"),
    ("post", "/studio/ashmere/agents/dm/compact/"),
    ("post", "/studio/ashmere/agents/dm/blocks/1/"),
    ("post", "/studio/ashmere/agents/import/"),
    ("post", "/studio/ashmere/agents/dm/turns/{turn}/cancel/"),
    ("post", "/studio/ashmere/agents/dm/blocks/1/replay/"),
    ("post", "/studio/ashmere/agents/dm/replays/{replay}/cancel/"),
    ("post", "/studio/ashmere/agents/dm/replays/{replay}/use/"),
    ("post", "/studio/ashmere/billing/adjustments/"),
    ("post", "/studio/ashmere/billing/limits/"),
    ("post", "/studio/ashmere/billing/alert/"),
]


@pytest.fixture
def story(agent):
    """The game's agent with a turn, memories and lines to leak, and a
    replay of its block (queued: this test's transaction never commits)."""
    turn = turn_send(
        agent=agent, content=script(call("close_memory", name="secret", description="d", content="c"))
    )
    turn.replay = replay_start(agent=agent, from_block=1, through=None, changes={})
    return turn


def filled(path: str, story) -> str:
    return path.format(turn=story.uuid, replay=story.replay.uuid)


@pytest.mark.parametrize("method, path", AGENT_API)
def test_another_games_key_gets_404_from_every_agent_endpoint(outsider, story, method, path):
    response = getattr(outsider, method)(filled(path, story), {}, format="json")

    assert response.status_code == 404, (method, path, response.content)
    assert response.json()["error"]["code"].endswith("not_found")


def test_another_games_put_defines_its_own_agent_and_leaves_ours_alone(outsider, story, agent):
    response = outsider.put("/api/v1/agents/dm", {"systemPrompt": "Not yours."}, format="json")

    agent.refresh_from_db()
    assert response.status_code == 201
    assert response.json()["stats"]["blocks"] == 0
    assert agent.system_prompt == "You are the dungeon master." and agent.last_block == 1


def test_another_games_key_sees_only_its_own_billing(outsider, story):
    lines = outsider.get("/api/v1/billing/lines").json()["lines"]
    by_turn = outsider.get(f"/api/v1/billing/lines?turn={story.uuid}").json()["lines"]

    assert lines == [] and by_turn == []
    assert outsider.get("/api/v1/agents").json()["agents"] == []


@pytest.mark.parametrize("method, path", PAGES)
def test_a_user_of_another_game_gets_404_from_every_page(story, outsider_client, method, path):
    response = getattr(outsider_client, method)(filled(path, story))

    assert response.status_code == 404, (method, path)
    assert b"secret" not in response.content


@pytest.mark.parametrize("method, path", [p for p in PAGES if p[0] == "post"])
def test_page_posts_need_the_csrf_token(story, game, method, path):
    client = Client(enforce_csrf_checks=True)
    client.force_login(page_user("mara", game, role="admin"))

    response = client.post(filled(path, story), {"content": "hi"})

    assert response.status_code == 403


def test_an_unknown_turn_of_our_own_agent_is_404(api, story):
    assert api.get(f"/api/v1/agents/dm/turns/{uuid.uuid4()}").status_code == 404
