"""Definitions with provenance on the pages (#36), through Django's test
client: the agent page says who defined its config last and from where
(and, when game code did, that the game's next construct replaces an
edit); the revisions page lists every revision, compares two, and
restores one as a new revision. (In Chromium: tests/browser/test_revisions.py.)"""

import json
import re
from html import unescape

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.models import Agent, AgentRevision, Replay
from studio.auth.keys import apikey_create
from studio.models import Role
from tests.conftest import client_for
from tests.support.agent_file import exported
from tests.support.pages import CONFIG, html
from tests.support.time_story import play

PAGE = "/studio/ashmere/agents/dm/"
REVISIONS = PAGE + "revisions/"
DM = "/api/v1/agents/dm"
DEFINITION = {"systemPrompt": "You are the dungeon master.", "model": "scripted", "memory": {}}


def restore_url(number: int) -> str:
    return f"{REVISIONS}{number}/restore/"


def text(response) -> str:
    """The page's words, tags taken out and spaces folded."""
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html(response))))


def newest() -> AgentRevision:
    return AgentRevision.objects.filter(agent__name="dm").order_by("-number").first()


@pytest.fixture
def server(game):
    """Game code: the API with a designer key labelled `server`."""
    return client_for(apikey_create(game=game, role=Role.DESIGNER, label="server")[1])


@pytest.fixture
def three(server, designer):
    """dm defined by game code, edited in the page, defined by game code again."""
    server.put(DM, DEFINITION, format="json")
    designer.post(PAGE, {**CONFIG, "system_prompt": "You are the ferryman."})
    server.put(DM, {**DEFINITION, "systemPrompt": "You are the innkeeper."}, format="json")
    assert [r.number for r in AgentRevision.objects.all()] == [1, 2, 3]


# --- the agent page ----------------------------------------------------------------------------


def test_the_agent_page_says_game_code_defined_it_last_and_that_its_next_construct_replaces_an_edit(
    designer, server
):
    server.put(DM, DEFINITION, format="json")

    page = designer.get(PAGE)

    assert page.status_code == 200
    assert "Defined by game code — key <code>server</code>, <time" in html(page)
    assert "data-defined-by-game" in html(page)
    assert "the game’s next construct of dm replaces an edit saved here" in text(page)


def test_an_edit_in_the_page_is_recorded_as_the_users_and_the_page_says_so(designer, server):
    server.put(DM, DEFINITION, format="json")

    saved = designer.post(PAGE, {**CONFIG, "system_prompt": "You are the ferryman."})
    page = designer.get(PAGE)

    assert saved.status_code == 302
    revision = newest()
    assert (revision.number, revision.via, revision.by_name, revision.by_key) == (2, "page", "mara", "")
    assert "Edited in the studio by mara" in text(page)
    assert "data-defined-by-game" not in html(page)


def revision_in_form(response) -> str:
    """The revision the page's config form was read at (its hidden field)."""
    return re.search(r'name="revision" value="(\d+)"', html(response))[1]


def test_an_edit_over_a_config_defined_since_the_page_was_read_is_not_saved_and_says_by_whom(
    designer, server
):
    server.put(DM, DEFINITION, format="json")
    read_at = revision_in_form(designer.get(PAGE))
    server.put(DM, {**DEFINITION, "systemPrompt": "You are the innkeeper."}, format="json")

    refused = designer.post(PAGE, {**CONFIG, "system_prompt": "You are the ferryman.", "revision": read_at})

    assert refused.status_code == 400
    agent = Agent.objects.get(name="dm")
    assert (agent.revision, agent.system_prompt) == (2, "You are the innkeeper.")
    shown = text(refused)
    assert "Not saved: dm was defined again since this page was read — it is at revision 2 (defined" in shown
    assert "by game code — key `server` at " in shown
    # The edit is kept in the form, now read at the newest revision: saving
    # it again replaces that revision knowingly.
    assert "You are the ferryman." in shown
    assert revision_in_form(refused) == "2"

    saved = designer.post(
        PAGE, {**CONFIG, "system_prompt": "You are the ferryman.", "revision": revision_in_form(refused)}
    )

    assert saved.status_code == 302
    assert Agent.objects.get(name="dm").system_prompt == "You are the ferryman."


def test_an_edit_posted_without_the_revision_it_was_read_at_is_saved_as_before(designer, server):
    server.put(DM, DEFINITION, format="json")

    saved = designer.post(PAGE, {**CONFIG, "system_prompt": "You are the ferryman."})

    assert saved.status_code == 302
    assert Agent.objects.get(name="dm").revision == 2


def test_a_new_agent_made_in_the_page_is_recorded_as_the_users(designer):
    designer.post("/studio/ashmere/agents/", {**CONFIG, "name": "ferryman"})

    revision = AgentRevision.objects.get(agent__name="ferryman")
    assert (revision.via, revision.by_name) == ("page", "mara")


def test_an_agent_defined_in_the_admin_is_recorded_as_the_admins(admin_client, agent):
    response = admin_client.post(
        f"/admin/agents/agent/{agent.pk}/change/", {**CONFIG, "system_prompt": "Hm."}
    )

    assert response.status_code == 302
    assert (newest().via, newest().by_name) == ("admin", "admin")


def test_a_fork_and_an_import_made_in_the_pages_are_recorded_as_the_users(admin, server, send):
    server.put(DM, DEFINITION, format="json")
    send("Hello.")

    admin.post(PAGE + "blocks/1/", {"name": "dm-b"})
    document = json.dumps(exported(server.get(DM + "/export"))).encode()

    admin.post(
        "/studio/ashmere/agents/import/",
        {"file": SimpleUploadedFile("dm.studio-agent.json", document), "name": "dm-copy"},
    )

    fork = AgentRevision.objects.filter(agent__name="dm-b").order_by("-number").first()
    copy = AgentRevision.objects.filter(agent__name="dm-copy").order_by("-number").first()
    assert (fork.via, fork.by_name, fork.note) == ("fork", "ines", "Forked from dm at block 1")
    assert (copy.via, copy.by_name, copy.note) == ("import", "ines", "Imported from 'dm.studio-agent.json'")


@pytest.mark.django_db(transaction=True)
def test_using_a_replays_definition_is_recorded_as_the_users_with_the_replay(
    designer, api, agent, studio_conf
):
    play(api, studio_conf)
    form = {
        "system_prompt": "You are a forgetful DM.",
        "model": "scripted",
        "memory_enabled": "on",
        "max_open_tokens": agent.max_open_tokens,
        "compaction_type": agent.compaction_type,
        "max_tokens": agent.max_tokens,
        "through": 9,
    }
    designer.post(PAGE + "blocks/9/replay/", form)
    replay = Replay.objects.get()

    designer.post(f"{PAGE}replays/{replay.uuid}/use/")

    revision = newest()
    assert (revision.via, revision.by_name) == ("replay", "mara")
    assert str(replay.uuid) in revision.note
    assert "Given a replay’s definition by mara" in text(designer.get(PAGE))


# --- the revisions page --------------------------------------------------------------------------


def test_the_revisions_page_lists_who_defined_each_revision_and_from_where(designer, three):
    page = designer.get(REVISIONS)

    assert page.status_code == 200
    rows = re.findall(r'data-revision="(\d+)" data-via="(\w+)"', html(page))
    assert rows == [("3", "api"), ("2", "page"), ("1", "api")]
    words = text(page)
    assert "Defined by game code — key server" in words and "Edited in the studio by mara" in words
    assert html(page).count('data-action="restore"') >= 2  # every revision but the current one


def test_the_revisions_page_compares_the_newest_with_the_one_before_by_default(designer, three):
    page = html(designer.get(REVISIONS))

    assert 'data-compared="2-3"' in page
    assert 'data-change="systemPrompt"' in page
    assert "<del>− You are the ferryman.</del>" in page
    assert "<ins>+ You are the innkeeper.</ins>" in page


def test_any_two_revisions_can_be_compared(designer, three):
    page = html(designer.get(REVISIONS + "?from=1&to=3"))

    assert 'data-compared="1-3"' in page
    assert "<del>− You are the dungeon master.</del>" in page
    assert 'data-change="memory"' not in page  # both have memory on, at the same budget


def test_a_comparison_of_numbers_it_does_not_have_falls_back_to_the_newest_two(designer, three):
    page = designer.get(REVISIONS + "?from=99&to=abc")

    assert page.status_code == 200 and 'data-compared="2-3"' in html(page)


def test_the_game_tools_changed_are_shown_as_a_diff(designer, server):
    tool = {"name": "give_item", "description": "Give the player an item.", "parameters": {"type": "object"}}
    server.put(DM, DEFINITION, format="json")
    server.put(DM, {**DEFINITION, "tools": [tool]}, format="json")

    page = html(designer.get(REVISIONS))

    assert 'data-change="tools"' in page and "give_item" in page


def test_restoring_a_revision_defines_the_agent_with_its_config_as_a_new_revision(designer, three):
    response = designer.post(restore_url(1), {"current": "3"})

    assert response.status_code == 302 and response["Location"] == REVISIONS
    agent = Agent.objects.get(name="dm")
    assert (agent.revision, agent.system_prompt) == (4, "You are the dungeon master.")
    revision = newest()
    assert (revision.via, revision.by_name, revision.note) == ("page", "mara", "Restored revision 1")
    after = designer.get(REVISIONS)
    assert "Restored revision 1 as revision 4" in text(after)
    assert "Game code defined dm before: the game’s next construct of it replaces this." in text(after)


def test_a_restore_over_a_revision_that_changed_since_the_page_was_read_changes_nothing(
    designer, three, server
):
    response = designer.post(restore_url(1), {"current": "2"})

    assert response.status_code == 302
    assert Agent.objects.get(name="dm").revision == 3
    shown = text(designer.get(response["Location"]))
    assert (
        "Not restored: dm was defined again since this page was read — it is at revision 3 (defined" in shown
    )
    assert "by game code — key `server` at " in shown


def test_restoring_the_config_the_agent_has_writes_nothing(designer, server):
    server.put(DM, DEFINITION, format="json")
    server.put(DM, {**DEFINITION, "systemPrompt": "Other."}, format="json")
    server.put(DM, DEFINITION, format="json")

    designer.post(restore_url(1), {"current": "3"})

    assert Agent.objects.get(name="dm").revision == 3
    assert "dm already has revision 1’s config: nothing changed." in text(designer.get(REVISIONS))


def test_a_restore_goes_through_the_definitions_rules(designer, server, studio_conf):
    server.put(DM, DEFINITION, format="json")
    server.put(DM, {**DEFINITION, "systemPrompt": "Other."}, format="json")
    studio_conf(ALLOW_SCRIPTED_MODEL=False)

    designer.post(restore_url(1), {"current": "2"})

    assert Agent.objects.get(name="dm").revision == 2
    assert "this studio does not offer it" in text(designer.get(REVISIONS))


def test_a_revision_there_is_not_cannot_be_restored(designer, server):
    server.put(DM, DEFINITION, format="json")

    designer.post(restore_url(7), {"current": "1"})

    assert Agent.objects.get(name="dm").revision == 1
    assert "has no revision '7' kept" in text(designer.get(REVISIONS))


# --- who may ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [REVISIONS, restore_url(1)])
def test_the_revisions_are_404_to_an_outsider_and_send_visitors_to_sign_in(
    client, outsider_client, server, url
):
    server.put(DM, DEFINITION, format="json")

    method = "get" if url == REVISIONS else "post"
    assert getattr(outsider_client, method)(url).status_code == 404
    assert getattr(client, method)(url)["Location"].startswith("/studio/login/")
    assert Agent.objects.get(name="dm").revision == 1


def test_a_restore_is_a_post(designer, server):
    server.put(DM, DEFINITION, format="json")

    assert designer.get(restore_url(1)).status_code == 405
    assert designer.post(REVISIONS).status_code == 405
