"""An agent through time in Chromium: pick a block on the timeline and see
the memories as of it, fork from a block, export an agent file and import
it under a new name — each reachable by keyboard."""

import json
import re

import pytest
from playwright.sync_api import expect

from agents.compaction import compaction_request
from agents.models import Agent, Block, CompactionReason
from tests.support.sending import turn_send
from tests.support.time_story import STORE_AFTER

from .conftest import ARTIFACTS, settled, sign_in, tab_to

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/studio/ashmere/agents/dm/"


def memory(page, name):
    return page.locator(f'[data-memory="{name}"]')


def expect_store(page, number) -> None:
    """The page shows the store as block `number` left it, and nothing else."""
    expected = STORE_AFTER[number]
    expect(page.locator("[data-memory]")).to_have_count(len(expected))
    for name, (is_open, content) in expected.items():
        expect(memory(page, name)).to_have_attribute("data-open", "true" if is_open else "false")
        expect(memory(page, name).locator("pre")).to_have_text(content)


def test_picking_a_block_on_the_timeline_shows_the_memories_as_of_it(signed_in, lived):
    page = signed_in
    page.goto(PAGE)
    settled(page)
    expect(page.locator("[data-timeline-block]")).to_have_count(9)

    block = page.locator('[data-timeline-block="3"]')
    tab_to(page, block)
    page.keyboard.press("Enter")

    expect(page).to_have_url(re.compile(r"/agents/dm/blocks/3/$"))
    expect(page.get_by_role("heading", name="dm as of block 3")).to_be_visible()
    expect_store(page, 3)
    expect(page.locator(".context-card")).to_contain_text("What block 3’s first model call was given")
    page.screenshot(path=str(ARTIFACTS / "agent-as-of-block.png"), full_page=True)

    page.locator('[data-timeline-block="6"]').click()

    expect(page).to_have_url(re.compile(r"/agents/dm/blocks/6/$"))
    expect(page.locator('[data-timeline-block="6"]')).to_have_attribute("aria-current", "page")
    expect_store(page, 6)  # quest deleted, bells written
    expect(page.locator("[data-context-block]")).to_contain_text("### quest — What the player wants now")

    page.get_by_role("link", name="Block 7 →").click()
    expect_store(page, 7)


def test_the_checkpoints_show_what_the_compactor_rewrote(signed_in, lived):
    page = signed_in
    page.goto(PAGE)
    settled(page)

    page.get_by_role("link", name="Checkpoints and what each changed").click()

    first = page.locator('[data-checkpoint="1"]')
    expect(first.locator('[data-rewrite="quest"]')).to_have_attribute("data-applied", "true")
    expect(first.locator('[data-rewrite="quest"] del')).to_have_text("− Find the silver key.")
    expect(first.locator('[data-rewrite="quest"] ins')).to_have_text("+ Cross the river.")
    expect(page.locator("[data-checkpoint]")).to_have_count(2)


def test_fork_from_a_block_lands_on_the_new_agent_with_the_history_up_to_it(signed_in, lived):
    page = signed_in
    page.goto(PAGE + "blocks/5/")
    name = page.get_by_label("Name of the new agent")
    expect(name).to_have_value("dm-from-5")

    name.fill("dm")
    page.locator("[data-action=fork]").click()

    expect(page.locator(".fork-card .errorlist")).to_contain_text("There is already an agent named 'dm'")
    expect(name).to_be_focused()
    name.fill("dm-b")
    fork = page.locator("[data-action=fork]")
    tab_to(page, fork)
    page.keyboard.press("Enter")

    expect(page).to_have_url(re.compile(r"/agents/dm-b/$"))
    expect(page.locator(".flash")).to_contain_text("Forked from dm as it stood when block 5 ended")
    expect(page.locator("[data-timeline-block]")).to_have_count(5)
    expect(page.locator("article.block[data-block]")).to_have_count(5)
    settled(page)
    page.locator('[data-timeline-block="5"]').click()
    expect_store(page, 5)
    assert Agent.objects.get(name="dm").last_block == 9


def test_export_then_import_under_a_new_name(page, admin_member, lived, tmp_path):
    sign_in(page, admin_member)
    page.goto(PAGE)
    settled(page)
    with page.expect_download() as download:
        page.get_by_role("link", name="Export agent file").click()
    assert download.value.suggested_filename == "dm.studio-agent.json"
    exported = tmp_path / "dm.studio-agent.json"
    download.value.save_as(exported)
    assert json.loads(exported.read_text())["format"] == "studio.agent"

    page.goto("/studio/ashmere/agents/")
    form = page.locator("#import-agent")
    not_a_file = tmp_path / "notes.json"
    not_a_file.write_text("the bells ring at dusk")
    form.get_by_label("Agent file").set_input_files(not_a_file)
    form.get_by_role("button", name="Import").click()
    expect(page.locator("#import-agent [data-field-error=file]")).to_contain_text("This file is not JSON")

    form.get_by_label("Agent file").set_input_files(exported)
    form.get_by_label("New name (optional)").fill("dm-copy")
    form.get_by_role("button", name="Import").click()

    expect(page).to_have_url(re.compile(r"/agents/dm-copy/$"))
    expect(page.locator(".flash")).to_contain_text("Imported dm-copy from its agent file.")
    expect(page.locator("[data-timeline-block]")).to_have_count(9)
    settled(page)
    page.locator('[data-timeline-block="5"]').click()
    expect_store(page, 5)


def test_a_summarys_changes_are_at_the_top_of_its_box_not_below_its_fold(signed_in, agent):
    for n in range(1, 21):
        turn_send(agent=agent, content=f"Bell {n} rings.")
    compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    turn_send(agent=agent, content="The tide turns.")
    turn_send(agent=agent, content="The crypt floods.")
    compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    page = signed_in

    page.goto(PAGE + "checkpoints/")

    summary = page.locator('[data-checkpoint="2"] pre.diff').first
    expect(summary.locator("[data-unchanged]")).to_contain_text("unchanged lines")
    expect(summary.locator("ins").first).to_contain_text("Bell 20 rings.")
    in_view = summary.evaluate(
        """(box) => {
            const change = box.querySelector("ins, del").getBoundingClientRect();
            return change.bottom <= box.getBoundingClientRect().bottom && box.scrollTop === 0;
        }"""
    )
    assert in_view, "the summary's first change is below its box's fold"
    page.locator('[data-checkpoint="2"]').get_by_text("Before and after in full").first.click()
    expect(page.locator('[data-checkpoint="2"] [aria-label="The summary after"]')).to_contain_text(
        "Bell 1 rings."
    )


def test_the_timeline_tells_running_from_cancelled_and_has_a_key(signed_in, lived, agent):
    Block.objects.filter(agent=agent, number=8).update(status="cancelled")
    Block.objects.filter(agent=agent, number=9).update(status="running")
    page = signed_in

    page.goto(PAGE)

    def background(number):
        block = page.locator(f'[data-timeline-block="{number}"]')
        return block.evaluate("(element) => getComputedStyle(element).backgroundColor")

    assert background(8) != background(9)
    assert background(7) not in (background(8), background(9))
    key = page.get_by_role("list", name="Key to the timeline")
    for words in ("completed", "running", "cancelled", "failed", "folded", "checkpoint"):
        expect(key).to_contain_text(words)
    expect(key).to_contain_text("compaction took it out of the agent’s context")


def test_a_refused_import_keeps_the_chosen_file_and_lists_each_problem(page, admin_member, game, tmp_path):
    sign_in(page, admin_member)
    page.goto("/studio/ashmere/agents/")
    old = tmp_path / "old-dm.json"
    old.write_text(json.dumps({"format": "x", "version": 9}))
    form = page.locator("#import-agent")

    form.get_by_label("Agent file").set_input_files(old)
    form.get_by_role("button", name="Import").click()

    problems = form.locator("[data-field-error=file]")
    expect(problems).to_have_count(4)
    expect(problems.nth(2)).to_have_text("name: This field is required.")
    assert ".;" not in form.inner_text()
    chosen = form.get_by_label("Agent file").evaluate("(input) => input.files[0] && input.files[0].name")
    assert chosen == "old-dm.json"
