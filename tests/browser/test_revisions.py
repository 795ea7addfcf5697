"""Definitions with provenance in Chromium (#36): the agent page says game
code defined the agent last, and that its next construct replaces an edit;
the revisions page compares two revisions and restores one from its diff,
which the agent page then shows as the designer's."""

import re

import pytest
from playwright.sync_api import expect

from agents.models import Agent
from studio.auth.keys import apikey_create
from studio.models import Role
from tests.conftest import client_for
from tests.support.accessibility import Audit

from .conftest import ARTIFACTS

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/studio/ashmere/agents/dm/"
DEFINITION = {"systemPrompt": "You are the dungeon master.\nKeep the story straight.", "memory": {}}


@pytest.fixture
def defined_by_game_code(game):
    """dm, defined twice by game code (a key labelled `server`): the second
    time with another prompt and model budget."""
    server = client_for(apikey_create(game=game, role=Role.DESIGNER, label="server")[1])
    for body in (
        DEFINITION,
        {**DEFINITION, "systemPrompt": "You are the innkeeper.\nKeep the story straight."},
    ):
        assert server.put("/api/v1/agents/dm", {**body, "model": "scripted"}, format="json").status_code in (
            200,
            201,
        )


def test_a_revision_is_restored_from_its_diff_and_the_page_says_who_did_it(signed_in, defined_by_game_code):
    page, audit = signed_in, Audit(signed_in)
    page.goto(PAGE)
    expect(page.locator("[data-defined-last]")).to_contain_text("Defined by game code — key server")
    notice = page.locator("[data-defined-by-game]")
    expect(notice).to_contain_text("the game’s next construct of dm replaces an edit saved here")
    notice.scroll_into_view_if_needed()
    page.locator("#config").screenshot(path=str(ARTIFACTS / "config-defined-by-game-code.png"))

    page.get_by_role("link", name="Revisions").first.click()
    expect(page).to_have_url(re.compile(r"/agents/dm/revisions/$"))
    compared = page.locator("#compare")
    expect(compared).to_have_attribute("data-compared", "1-2")
    expect(compared.locator('[data-change="systemPrompt"] del')).to_contain_text(
        "You are the dungeon master."
    )
    expect(compared.locator('[data-change="systemPrompt"] ins')).to_contain_text("You are the innkeeper.")
    audit.check("an agent's revisions")
    page.screenshot(path=str(ARTIFACTS / "revisions.png"), full_page=True)

    compared.get_by_role("button", name="Restore revision 1").click()

    expect(page.locator(".flash-success")).to_contain_text("Restored revision 1 as revision 3")
    newest = page.locator('[data-revision="3"]')
    expect(newest).to_have_attribute("data-via", "page")
    expect(newest).to_contain_text("Edited in the studio by mara")
    expect(newest).to_contain_text("Restored revision 1")
    page.screenshot(path=str(ARTIFACTS / "revisions-restored.png"), full_page=True)
    assert Agent.objects.get(name="dm").system_prompt == DEFINITION["systemPrompt"]
    page.get_by_role("link", name="dm now").click()
    expect(page.locator("[data-defined-last]")).to_contain_text("Edited in the studio by mara")
    expect(page.locator("[data-defined-by-game]")).to_have_count(0)


def test_an_edit_over_a_config_game_code_defined_meanwhile_is_kept_and_saved_only_when_asked_again(
    signed_in, defined_by_game_code, game
):
    page, audit = signed_in, Audit(signed_in)
    page.goto(PAGE)
    page.get_by_role("textbox", name="System prompt").fill("You are the ferryman.")
    # Game code defines dm again while the designer is editing.
    server = client_for(apikey_create(game=game, role=Role.DESIGNER, label="server")[1])
    body = {**DEFINITION, "systemPrompt": "You are the smith.", "model": "scripted"}
    assert server.put("/api/v1/agents/dm", body, format="json").status_code == 200

    page.get_by_role("button", name="Save config").click()

    expect(page.locator("#config")).to_contain_text(
        "Not saved: dm was defined again since this page was read — it is at revision 3"
    )
    expect(page.get_by_role("textbox", name="System prompt")).to_have_value("You are the ferryman.")
    assert Agent.objects.get(name="dm").system_prompt == "You are the smith."
    audit.check("an edit not saved over a newer revision")

    page.get_by_role("button", name="Save config").click()

    expect(page.locator(".flash-success")).to_be_visible()
    expect(page.locator("[data-defined-last]")).to_contain_text("Edited in the studio by mara")
    assert Agent.objects.get(name="dm").system_prompt == "You are the ferryman."
