"""Agent files: an export is one JSON document; an import (admin keys) makes
an agent of it in the key's game; a round trip keeps what a designer sees.

Here, the tests that need a commit or an agent of their own; those that
only look at the nine-block story are in story/test_files.py, which plays it
once."""

import pytest

from agents.engine import turn_send
from agents.models import Turn, TurnStatus
from agents.turn_slot import turn_cancel

from ..conftest import error_of, in_thread, script, wait_for
from .time_story import DM, play

pytestmark = pytest.mark.django_db(transaction=True)

IMPORT = "/api/v1/agents/import"


@pytest.fixture
def story(api, agent, studio_conf):
    return play(api, studio_conf)


def test_an_export_while_a_block_is_being_played_ends_at_the_block_before(api, agent):
    turn_send(agent=agent, content="first")
    thread, _ = in_thread(turn_send, agent=agent, content=script({"sleep": 30}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    document = api.get(f"{DM}/export").json()
    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    thread.join(10)

    assert [b["block"] for b in document["blocks"]] == [1]


# --- who may import, and names ------------------------------------------------------------------


def test_import_is_no_agent_name(api, admin_api, agent):
    refused = api.post(f"{DM}/fork", {"name": "import", "atBlock": 1}, format="json")

    assert admin_api.put(IMPORT, {"systemPrompt": "I import goods."}, format="json").status_code == 405
    assert admin_api.get(IMPORT).status_code == 405
    assert error_of(refused)["code"] == "invalid_name"


# --- bad files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [[], "agent", None, {}])
def test_a_body_that_is_no_agent_file_at_all_is_400(admin_api, body):
    response = admin_api.post(IMPORT, body, format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] in ("invalid_agent_file", "invalid_json")


def test_a_small_hand_written_file_imports(api, admin_api):
    document = {
        "format": "studio.agent",
        "version": 1,
        "name": "innkeeper",
        "config": {"systemPrompt": "You keep the inn.", "memory": {}},
        "memories": [
            {
                "name": "rooms",
                "description": "Who sleeps where",
                "content": "Room 2: Mara.",
                "open": False,
                "version": 1,
                "updatedAt": "2026-11-30T12:00:00Z",
                "updatedBy": "agent",
            }
        ],
    }

    response = admin_api.post(IMPORT, document, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["memory"] == {"maxOpenTokens": 4000}
    assert (
        api.get("/api/v1/agents/innkeeper/memories")
        .json()["memories"][0]["updatedAt"]
        .startswith("2026-11-30T12:00:00")
    )
    turn = api.post("/api/v1/agents/innkeeper/messages", {"content": "A room, please."}, format="json")
    assert turn.json()["turn"]["block"] == 1
