"""Replays in Chromium: "Replay from here…" on the agent as of a block,
with its definition filled in; the replay page filling in row by row as
the replay plays, without a reload; and "Use this definition" applied to
the agent once the designer confirms."""

import re

import pytest
from playwright.sync_api import expect

from agents.models import Agent, Replay
from agents.replays import replay_run, replay_start
from tests.conftest import in_thread
from tests.support.accessibility import Audit

from .conftest import ARTIFACTS, settled

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("event_buffers_cleared")]

PAGE = "/studio/ashmere/agents/dm/"


def row(page, number):
    return page.locator(f'[data-replay-row="{number}"]')


def test_replay_from_a_block_with_a_changed_prompt_shows_both_side_by_side(signed_in, lived):
    page = signed_in
    page.goto(PAGE + "blocks/5/")
    form = page.locator("#replay")
    prompt = form.get_by_label("System prompt")
    expect(prompt).to_have_value("You are the dungeon master.")
    expect(form.get_by_label("Through block")).to_have_value("9")

    prompt.fill("You are the dungeon master. Keep a memory named `quest` open, always.")
    form.get_by_label("Give the agent memory tools").uncheck()
    form.screenshot(path=str(ARTIFACTS / "replay-from-here.png"))
    form.locator("[data-action=replay]").click()

    expect(page).to_have_url(re.compile(r"/agents/dm/replays/[0-9a-f-]+/$"))
    expect(page.locator("[data-replay-status]")).to_have_attribute("data-replay-status", "completed")
    expect(page.locator("[data-replay-row]")).to_have_count(5)
    for number in range(5, 10):
        expect(row(page, number).locator('[data-side="original"]')).to_be_visible()
        expect(row(page, number).locator('[data-side="replay"]')).to_be_visible()
    # Block 5 opened npcs; without memory tools the replay could not.
    expect(row(page, 5).locator('[data-side="original"] [data-tool-call="open_memory"]')).to_have_count(1)
    expect(row(page, 5).locator('[data-side="replay"] [data-tool-call]')).to_have_count(0)
    expect(row(page, 5)).to_contain_text("tool calls differ")
    bells = page.locator('[data-memory-compared="bells"]')
    expect(bells).to_have_attribute("data-change", "removed")
    expect(page.locator('[data-change="systemPrompt"] ins')).to_contain_text(
        "Keep a memory named `quest` open"
    )
    page.screenshot(path=str(ARTIFACTS / "replay-side-by-side.png"), full_page=True)


def test_the_rows_fill_in_as_the_replay_plays_without_a_reload(signed_in, lived, agent, studio_conf):
    studio_conf(COMPACTION_RUNNER="none")  # queued here; played below, in this process
    replay = replay_start(agent=agent, from_block=6, through=9, changes={"systemPrompt": "Another voice."})
    page = signed_in
    page.goto(f"{PAGE}replays/{replay.uuid}/")
    settled(page)
    page.evaluate("window.notReloaded = true")
    expect(page.locator("[data-replay-status]")).to_have_attribute("data-replay-status", "queued")
    expect(row(page, 6).locator('[data-side="replay"]')).to_contain_text("Not played yet.")

    thread, box = in_thread(replay_run, str(replay.uuid))
    thread.join(60)

    assert "error" not in box, box
    expect(page.locator("[data-replay-status]")).to_have_attribute("data-replay-status", "completed")
    for number in range(6, 10):
        expect(row(page, number)).to_have_attribute("data-same-reply", "true")
    expect(row(page, 9).locator('[data-side="replay"] .replay-reply')).to_have_text(
        row(page, 9).locator('[data-side="original"] .replay-reply').inner_text()
    )
    expect(page.locator("[data-meter=replay-progress]")).to_contain_text("4 of 4 blocks played")
    assert page.evaluate("window.notReloaded") is True


def test_use_this_definition_asks_first_then_gives_it_to_the_agent(signed_in, lived, agent):
    replay = replay_start(agent=agent, from_block=9, through=9, changes={"systemPrompt": "A kinder master."})
    page = signed_in
    page.goto(f"{PAGE}replays/{replay.uuid}/")

    page.locator("[data-action=use-definition]").click()

    expect(page).to_have_url(re.compile(r"/replays/[0-9a-f-]+/use/$"))
    expect(page.locator('[data-change="systemPrompt"] del')).to_contain_text("You are the dungeon master.")
    expect(page.locator('[data-change="systemPrompt"] ins')).to_contain_text("A kinder master.")
    assert Agent.objects.get(name="dm").system_prompt == "You are the dungeon master."

    page.locator("[data-action=confirm-use-definition]").click()

    expect(page).to_have_url(re.compile(r"/agents/dm/$"))
    expect(page.locator(".flash")).to_contain_text("dm now has the replay’s definition")
    assert Agent.objects.get(name="dm").system_prompt == "A kinder master."
    assert Replay.objects.get().status == "completed"


def test_the_replay_pages_have_no_serious_wcag_violation(signed_in, lived, agent):
    page, audit = signed_in, Audit(signed_in)
    page.goto(PAGE + "blocks/5/")
    submit = page.locator("#replay")
    submit.get_by_label("maxOpenTokens").fill("20000")
    submit.locator("[data-action=replay]").click()
    expect(page.locator("#replay [data-definition-error]")).to_be_visible()
    audit.check("as of a block, a replay refused")
    replay = replay_start(
        agent=agent, from_block=1, through=9, changes={"memory": None, "systemPrompt": "Other."}
    )
    page.goto(f"{PAGE}replays/{replay.uuid}/")
    settled(page)
    audit.check_narrow_and_wide("a replay")
    page.goto(f"{PAGE}replays/")
    audit.check("the agent's replays")
    page.goto(f"{PAGE}replays/{replay.uuid}/use/")
    audit.check("use this definition")
    audit.assert_clean()
