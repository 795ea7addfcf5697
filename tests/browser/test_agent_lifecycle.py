"""An agent's page that scales, and its lifecycle, in Chromium: the section
nav reaching Config at once, a timeline of 200 blocks in ranges, deleting
with a confirmation, a replay's copy with no send box, the hint that
follows maxTokens, the replay's banner going once it ends — each page
checked by axe where it changed."""

import pytest
from playwright.sync_api import expect

from agents import replays
from agents.models import Agent, Replay
from tests.conftest import call
from tests.support.accessibility import Audit
from tests.support.browser import blocks_made, open_live, play

from .conftest import ARTIFACTS, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/studio/ashmere/agents/dm/"
NOTE = {"name": "quest", "description": "What the player wants now", "content": "Find the silver key."}


@pytest.fixture
def audit(page):
    return Audit(page)


def config_heading(page):
    return page.get_by_role("heading", name="Config", exact=True)


def test_the_section_nav_reaches_config_at_once_and_stays_in_view(signed_in, agent, audit):
    blocks_made(agent, 30, words=3)  # a long history: config far below
    page = signed_in
    open_live(page, PAGE)
    expect(config_heading(page)).not_to_be_in_viewport()
    nav = page.get_by_role("navigation", name="Sections of this page")

    nav.get_by_role("link", name="Config").click()

    expect(page).to_have_url(PAGE + "#config")
    expect(config_heading(page)).to_be_in_viewport()
    expect(nav).to_be_in_viewport()  # it stays at the top as the page scrolls
    expect(nav.get_by_role("link", name="Config")).to_have_attribute("aria-current", "location")
    box = nav.bounding_box()
    heading = config_heading(page).bounding_box()
    assert heading["y"] >= box["y"] + box["height"], "the bar covers the section's heading"
    page.screenshot(path=str(ARTIFACTS / "agent-sections.png"))

    nav.get_by_role("link", name="History").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="History", exact=True)).to_be_in_viewport()
    audit.check_narrow_and_wide("the agent page with its section nav")
    audit.assert_clean()


def test_a_timeline_of_200_blocks_is_in_ranges_to_open_one_by_one(signed_in, agent, audit):
    blocks_made(agent, 200, failed={7})
    page = signed_in
    open_live(page, PAGE)
    ranges = page.locator("details.timeline-range")

    expect(ranges).to_have_count(4)
    expect(page.locator("details.timeline-range[open]")).to_have_count(1)
    expect(page.locator("[data-timeline-block='200']")).to_be_visible()
    expect(page.locator("[data-timeline-block='7']")).to_be_hidden()
    page.locator("#timeline").screenshot(path=str(ARTIFACTS / "timeline-ranges.png"))

    page.get_by_text("Blocks 1–50").click()
    expect(page.locator("[data-timeline-block='7']")).to_be_visible()
    page.locator("[data-timeline-block='7']").click()

    expect(page).to_have_url(PAGE + "blocks/7/")
    expect(page.locator("[data-timeline-block='7']")).to_have_attribute("aria-current", "page")
    expect(page.locator("details.timeline-range[open]")).to_have_count(1)
    expect(page.locator("details.timeline-range[open] summary")).to_contain_text("Blocks 1–50 · 1 failed")
    audit.check("an agent as of block 7 of 200")
    page.goto(PAGE)
    audit.check("an agent page with 200 blocks")
    audit.assert_clean()


def test_an_admin_deletes_an_agent_after_seeing_what_goes(page, admin_member, agent, audit):
    play(agent, call("close_memory", **NOTE))
    sign_in(page, admin_member)
    open_live(page, PAGE)

    page.get_by_role("link", name="Delete…").click()

    expect(page.get_by_role("heading", name="Delete dm?")).to_be_visible()
    expect(page.locator("[data-count=blocks]")).to_contain_text("1 block")
    expect(page.locator("[data-count=memories]")).to_contain_text("1 memory")
    expect(page.locator("[data-count=cost-lines]")).to_contain_text("cost line")
    audit.check("the delete confirmation")
    page.screenshot(path=str(ARTIFACTS / "agent-delete.png"))
    assert Agent.objects.filter(name="dm").exists()  # nothing goes before the confirmation

    page.get_by_role("button", name="Delete dm").click()

    expect(page).to_have_url("/studio/ashmere/agents/")
    expect(page.locator(".flash")).to_contain_text("Deleted dm")
    assert not Agent.objects.filter(name="dm").exists()
    audit.assert_clean()


def test_a_designer_is_not_offered_delete(signed_in, agent):
    open_live(signed_in, PAGE)

    expect(signed_in.get_by_role("link", name="Delete…")).to_have_count(0)


@pytest.fixture
def copy(agent, studio_conf) -> Agent:
    """A queued replay of dm's blocks 1–2, left so (no runner plays it here):
    its copy is there to be looked at."""
    play(agent, call("close_memory", **NOTE))
    play(agent, {"say": "The chapel is cold."})
    studio_conf(COMPACTION_RUNNER="none")
    replay = replays.replay_start(
        agent=agent, from_block=1, through=2, changes={"systemPrompt": "Forgetful."}
    )
    return replay.replay_agent


def test_a_copys_page_says_what_it_is_and_has_no_send_box(signed_in, copy, audit):
    page = signed_in
    open_live(page, f"/studio/ashmere/agents/{copy.name}/")

    notice = page.locator("[data-origin=copy]")
    expect(notice).to_contain_text("A copy of dm made to replay blocks 1–2")
    expect(page.get_by_role("textbox", name="What the player says")).to_have_count(0)
    expect(page.get_by_role("button", name="Send")).to_have_count(0)
    expect(page.get_by_role("link", name="Edit config")).to_have_count(0)
    expect(page.get_by_role("heading", name="Config", exact=True)).to_have_count(0)
    audit.check("a replay's copy's page")
    page.screenshot(path=str(ARTIFACTS / "replay-copy.png"))

    notice.get_by_role("link", name="see its replay").click()
    expect(page).to_have_url(f"{PAGE}replays/{copy.replay.uuid}/")
    audit.assert_clean()


def test_the_replays_banner_goes_once_it_ends(signed_in, copy):
    page = signed_in
    replay = Replay.objects.get()
    open_live(page, f"{PAGE}replays/{replay.uuid}/")
    banner = page.locator("[data-replay-playing]")
    expect(banner).to_contain_text("the rows appear here as they are played")

    replays.replay_cancel(replay)

    expect(banner).to_have_count(0)
    expect(page.locator("[data-replay-status]")).to_have_attribute("data-replay-status", "cancelled")


def test_the_rule_hint_follows_max_tokens_as_it_is_typed(signed_in, agent):
    page = signed_in
    page.goto("/studio/ashmere/agents/")
    form = page.locator("form", has=page.get_by_role("button", name="Create agent"))
    hint = form.locator("[data-rule-limit]")
    expect(hint).to_have_text(" (now: 15,999 at most)")

    form.get_by_label("maxTokens").fill("8000")
    expect(hint).to_have_text(" (now: 3,999 at most)")
    form.get_by_label("maxTokens").fill("1000001")
    expect(hint).to_have_text(" (now: 500,000 at most)")
    form.get_by_label("maxTokens").fill("")
    expect(hint).to_be_hidden()
    form.get_by_label("maxTokens").press_sequentially("64000")
    expect(hint).to_have_text(" (now: 31,999 at most)")
