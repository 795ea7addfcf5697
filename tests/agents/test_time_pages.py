"""An agent through time on the pages, through Django's test client: the
timeline, the agent as of a block (and the blocks it cannot show), a fork
from there, the checkpoints with what each changed, export and import.

Here, the tests that need a commit or an agent of their own; those that
only look at the nine-block story are in story/test_pages.py, which plays it
once."""

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.models import Turn, TurnStatus
from agents.sending.turn_slot import turn_cancel
from tests.support.exports import streamed
from tests.support.sending import turn_send
from tests.support.time_story import PAGE, at, compact_dropping_a_rewrite, play, text

from ..conftest import UNTIL_CANCELLED, in_thread, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def story(api, agent, studio_conf):
    return play(api, studio_conf)


# --- the timeline ----------------------------------------------------------------------------


def test_the_timeline_is_a_live_fragment_of_the_agent_page(designer, agent):
    turn_send(agent=agent, content="hello")

    response = designer.get(PAGE + "?fragment=timeline")

    assert response.status_code == 200
    assert 'data-timeline-block="1"' in response.content.decode()
    assert "Send as the player" not in response.content.decode()


# --- as of a block ----------------------------------------------------------------------------


def test_a_block_still_being_played_says_so_rather_than_failing(designer, agent):
    turn_send(agent=agent, content="first")
    thread, _ = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    response = designer.get(at(2))
    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    thread.join(10)

    assert response.status_code == 409
    assert "Block 2 is still being played." in text(response)
    assert f'href="{at(1)}"' in response.content.decode()
    assert 'data-action="fork"' not in response.content.decode()
    assert designer.get(at(2)).status_code == 200


# --- fork from here --------------------------------------------------------------------------------


# --- checkpoints -----------------------------------------------------------------------------------


def test_a_checkpoint_in_force_from_a_block_not_played_yet_links_to_no_such_block(designer, api, agent):
    for words in ("I knock.", "I wait.", "I listen."):
        turn_send(agent=agent, content=words)
    assert api.post("/api/v1/agents/dm/compact").status_code == 202

    page = designer.get(PAGE + "checkpoints/").content.decode()

    assert 'data-in-force="4"' in page
    assert f'href="{at(4)}"' not in page
    assert "In force from block 4, the next block dm plays" in page
    turn_send(agent=agent, content="I open the door.")
    page = designer.get(PAGE + "checkpoints/").content.decode()
    assert f'<a href="{at(4)}">dm as of block 4</a>' in page
    assert designer.get(at(4)).status_code == 200


def test_a_dropped_rewrite_is_shown_with_why(designer, api, agent, monkeypatch):
    compact_dropping_a_rewrite(api, agent, monkeypatch)

    page = designer.get(PAGE + "checkpoints/").content.decode()

    assert 'data-rewrite="quest" data-applied="false"' in page
    assert "written after the compactor read it" in page
    assert "<ins>+ Later.</ins>" in page


# --- agent files -------------------------------------------------------------------------------------

IMPORT = "/studio/ashmere/agents/import/"
JSON = {"HTTP_X_REQUESTED_WITH": "fetch", "HTTP_ACCEPT": "application/json"}
NOT_AN_AGENT_FILE = json.dumps({"format": "x", "version": 9}).encode()


def test_a_refused_import_lists_each_problem_apart_and_asks_for_the_file_again(admin):
    upload = SimpleUploadedFile("old.json", NOT_AN_AGENT_FILE, content_type="application/json")

    page = admin.post(IMPORT, {"file": upload}).content.decode()

    problems = re.findall(r"<li>([^<]*)</li>", page[page.index('id="import-agent"') :])
    assert problems[:4] == [
        "format: must be &quot;studio.agent&quot;: this is not a studio agent file",
        "version: this studio reads version 1 of the format, not 9",
        "name: This field is required.",
        "config: This field is required.",
    ]
    assert ".;" not in page
    assert "Choose the file again" in page


def test_an_import_posted_by_the_page_answers_json_with_each_problem_by_its_field(admin):
    upload = SimpleUploadedFile("old.json", NOT_AN_AGENT_FILE, content_type="application/json")

    answer = admin.post(IMPORT, {"file": upload}, **JSON)

    assert answer.status_code == 400
    details = answer.json()["error"]["details"]
    assert [d["field"] for d in details] == ["file"] * 4
    assert details[2]["message"] == "name: This field is required."


def test_an_import_posted_by_the_page_answers_where_the_new_agent_is(admin, api, agent):
    turn_send(agent=agent, content="hello")
    document = streamed(api.get("/api/v1/agents/dm/export"))
    upload = SimpleUploadedFile("dm.json", document, content_type="application/json")

    answer = admin.post(IMPORT, {"file": upload, "name": "dm-copy"}, **JSON)

    assert answer.json() == {"message": "Imported.", "redirect": "/studio/ashmere/agents/dm-copy/"}
    assert "Imported dm-copy from its agent file." in text(admin.get("/studio/ashmere/agents/dm-copy/"))
