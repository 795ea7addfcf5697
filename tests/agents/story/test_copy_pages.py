"""Copies in their place, through Django's test client: a replay's copy
says what it is on every page of it, takes no sends and no edits, and is
left out of the overview, its counts and lists and Billing's list of the
game's agents (its cost lines show as its replay's); a fork says what it
was forked from. (In Chromium: tests/browser/test_agent_lifecycle.py.)
Of the nine-block story, played once for the module (conftest.py); each
test's copy is left queued, which needs no commit."""

import re
from decimal import Decimal

import pytest

from agents.models import Agent, Replay, Turn, TurnStatus
from billing.models import CostLine
from tests.support.pages import CONFIG, html
from tests.support.time_story import PAGE, text

# Not transactional: the story is played once for the module (conftest.py).
pytestmark = pytest.mark.django_db


@pytest.fixture
def copy(designer, agent, story, studio_conf) -> Agent:
    """The copy of a replay of dm's blocks 8–9, left queued (no runner plays
    it), so the copy is there to look at."""
    studio_conf(COMPACTION_RUNNER="none")
    response = designer.post(
        f"{PAGE}blocks/8/replay/",
        {
            "system_prompt": "You are a forgetful DM.",
            "model": agent.model,
            "memory_enabled": "on",
            "max_open_tokens": agent.max_open_tokens,
            "compaction_type": agent.compaction_type,
            "max_tokens": agent.max_tokens,
            "through": 9,
        },
    )
    assert response.status_code == 302
    return Replay.objects.get().replay_agent


def copy_url(copy: Agent, rest: str = "") -> str:
    return f"/studio/ashmere/agents/{copy.name}/{rest}"


def test_a_copys_page_says_what_it_is_and_leads_to_its_replay(designer, copy):
    replay = copy.replay
    page = html(designer.get(copy_url(copy)))

    notice = re.search(
        r'<div class="notice notice-info origin" data-replay-copy data-origin="copy">(.*?)</div>', page, re.S
    )
    assert notice, "the copy's page does not say it is a copy"
    said = " ".join(re.sub(r"<[^>]+>", " ", notice.group(1)).split())
    assert said.startswith("A copy of dm made to replay blocks 8–9")
    assert f'href="{PAGE}replays/{replay.uuid}/"' in notice.group(1)


@pytest.mark.parametrize("rest", ["", "revisions/", "checkpoints/", "memories/", "blocks/7/", "replays/"])
def test_every_page_of_a_copy_says_it_is_one(designer, copy, rest):
    response = designer.get(copy_url(copy, rest))

    assert response.status_code == 200
    assert 'data-origin="copy"' in html(response)


def test_a_copy_has_no_send_box_no_config_form_no_compact_and_no_delete(admin, copy):
    page = html(admin.get(copy_url(copy)))

    assert copy_url(copy, "send/") not in page and 'id="send-content"' not in page
    assert "Edit config" not in page and 'id="config"' not in page and "Save config" not in page
    assert "Compact now" not in page
    assert 'data-action="delete"' not in page
    assert "data-next-send" not in page
    assert 'href="#config"' not in page and 'href="#send"' not in page  # nor in the section nav


def test_a_copy_takes_no_config_posted_to_its_page(designer, copy):
    response = designer.post(copy_url(copy), CONFIG)

    copy.refresh_from_db()
    assert response.status_code == 403
    assert copy.system_prompt == "You are a forgetful DM."


def test_a_copys_revisions_offer_no_restore(designer, copy):
    assert 'data-action="restore"' not in html(designer.get(copy_url(copy, "revisions/")))


def test_the_overview_counts_and_lists_only_the_games_characters(designer, agent, copy):
    Turn.objects.create(agent=copy, status=TurnStatus.QUEUED)
    Turn.objects.create(agent=copy, status=TurnStatus.FAILED, error="The copy's turn failed.")

    page = html(designer.get("/studio/ashmere/"))

    assert copy.name not in page
    agents = re.search(r'id="agents-count-title"[^>]*>Agents</h2>\s*<div class="stat">(\d+)</div>', page)
    assert agents and agents.group(1) == "1"
    assert page.count("data-overview-agent=") == 1
    assert "data-live-turn=" not in page
    assert "The copy's turn failed." not in page


def test_billing_leaves_copies_out_of_its_agents_and_shows_their_lines_as_their_replays(
    designer, agent, copy
):
    CostLine.objects.create(
        game=agent.game,
        agent_name=copy.name,
        kind="model",
        label="Model",
        quantity=120,
        amount=Decimal("0.01"),
    )

    page = html(designer.get("/studio/ashmere/billing/"))

    options = re.findall(
        r'<option value="([^"]*)"', page[page.index('id="filter-agent"') :].split("</select>")[0]
    )
    assert options == ["", "dm"]
    line = re.search(r"<a [^>]*data-line-replay[^>]*>([^<]*)</a>", page)
    assert line and line.group(1) == "replay of dm"
    assert f'href="{PAGE}replays/{copy.replay.uuid}/"' in line.group(0)


def test_a_fork_says_what_it_was_forked_from_and_the_api_too(designer, admin_api, api, agent, story):
    assert (
        api.post("/api/v1/agents/dm/fork", {"name": "dm-b", "atBlock": 5}, format="json").status_code == 201
    )

    page = html(designer.get("/studio/ashmere/agents/dm-b/"))
    answered = api.get("/api/v1/agents/dm-b").json()
    listed = html(designer.get("/studio/ashmere/agents/"))
    admin_api.delete("/api/v1/agents/dm")
    orphan = text(designer.get("/studio/ashmere/agents/dm-b/"))

    fork = re.search(
        r'<p class="small muted origin" data-forked-from="dm" data-origin="fork">(.*?)</p>', page, re.S
    )
    assert fork and f'href="{PAGE}blocks/5/"' in fork.group(1)
    assert " ".join(re.sub(r"<[^>]+>", " ", fork.group(1)).split()).startswith("Forked from dm at block 5")
    assert answered["forkedFrom"] == {"agent": "dm", "block": 5}
    assert 'data-forked-from="dm">forked from dm at block 5<' in listed
    assert "Forked from dm at block 5 (dm is no longer in this game)" in orphan


def test_an_ordinary_agent_says_nothing_of_an_origin(designer, agent):
    assert "data-origin" not in html(designer.get(PAGE))
