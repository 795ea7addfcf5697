"""The Memories page and the Billing page in Chromium: memories change live
as the agent writes them; staff adjust the budget, and a game's admin sets
its cap and low-balance alert."""

import re
import uuid

import pytest
from django.db import transaction
from playwright.sync_api import expect

from billing import ledger
from memories.models import Memory
from tests.conftest import call
from tests.support.browser import NPCS, QUEST, play, populate, wait_until_live

from .conftest import ARTIFACTS, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def memories_url(agent) -> str:
    return f"/studio/{agent.game.slug}/agents/{agent.name}/memories/"


def mark_page(page) -> None:
    """A flag that only survives if the page is never reloaded."""
    page.evaluate("window.notReloaded = true")


def assert_not_reloaded(page) -> None:
    assert page.evaluate("window.notReloaded === true")


def assert_no_sideways_scroll(page) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than the window"


# --- memories, live ---------------------------------------------------------------------------------


def test_a_memory_the_agent_opens_turns_open_without_a_reload(signed_in, agent):
    play(agent, call("close_memory", **QUEST))
    signed_in.goto(memories_url(agent))
    row = signed_in.locator('[data-memory="quest"]')
    expect(row).to_have_attribute("data-open", "false")
    wait_until_live(signed_in)
    mark_page(signed_in)

    play(agent, call("open_memory", name="quest"), {"say": "I remember."})

    expect(row).to_have_attribute("data-open", "true")
    expect(row.locator(".badge-open")).to_have_text("open")
    card = signed_in.locator('[data-memory-card="quest"]')
    expect(card.locator('[data-change="opened"]')).to_have_count(1)
    expect(signed_in.locator('[data-meter="open-tokens"] .meter-value')).to_have_text(
        str(Memory.objects.get(agent=agent, name="quest").tokens)
    )
    assert_not_reloaded(signed_in)


def test_a_memory_the_agent_creates_appears_as_a_new_row(signed_in, agent):
    play(agent, call("close_memory", **QUEST))
    signed_in.goto(memories_url(agent))
    expect(signed_in.locator("[data-memory]")).to_have_count(1)
    wait_until_live(signed_in)
    mark_page(signed_in)

    play(agent, call("close_memory", **NPCS))

    new_row = signed_in.locator('[data-memory="npcs"]')
    expect(new_row).to_have_attribute("data-open", "false")
    expect(new_row).to_contain_text("Everyone Mara has met")
    expect(signed_in.locator("[data-memory]")).to_have_count(2)
    expect(signed_in.locator('[data-memory-card="npcs"] pre.text').first).to_contain_text(
        "owes her a crossing"
    )
    assert_not_reloaded(signed_in)


def test_the_first_memory_replaces_the_empty_state(signed_in, agent):
    signed_in.goto(memories_url(agent))
    expect(signed_in.locator('[data-empty="store"]')).to_contain_text("No memories yet.")
    wait_until_live(signed_in)

    play(agent, call("close_memory", **QUEST))

    expect(signed_in.locator('[data-memory="quest"]')).to_have_count(1)
    expect(signed_in.locator('[data-empty="store"]')).to_have_count(0)


def test_a_rewrite_shows_words_removed_and_added_apart(signed_in, agent):
    play(agent, call("close_memory", name="quest", description="Now", content="Mara wants the silver key."))
    play(
        agent,
        call("open_memory", name="quest"),
        call("close_memory", name="quest", content="Find the silver key."),
    )
    page = signed_in

    page.goto(memories_url(agent))

    diff = page.locator('[data-memory-card="quest"] pre.diff')
    expect(diff.locator("del")).to_have_text("Mara wants")
    expect(diff.locator("ins")).to_have_text("Find")
    assert diff.inner_text() == "Mara wants Find the silver key."


def test_a_change_in_a_memorys_history_links_to_its_block(signed_in, agent):
    play(agent, {"say": "Nothing yet."})
    play(agent, call("close_memory", **QUEST))
    page = signed_in
    page.goto(memories_url(agent))

    page.locator('[data-memory-card="quest"] [data-change="created"]').get_by_role(
        "link", name="block 2"
    ).click()

    expect(page).to_have_url(re.compile(r"/agents/dm/blocks/2/$"))
    expect(page.get_by_role("heading", name="dm as of block 2")).to_be_visible()


def test_a_click_begun_as_the_page_updates_itself_still_lands(signed_in, agent):
    populate(agent)
    page = signed_in
    page.add_init_script(
        "window.replaced = [];"
        "document.addEventListener('studio:fragment', (event) => window.replaced.push(event.detail.name));"
    )
    page.goto(memories_url(agent))
    wait_until_live(page)
    page.wait_for_function("window.replaced.includes('memories')")  # the refresh a live page begins with
    deleted = page.locator('[data-deleted-memory="inventory"]')
    summary = deleted.locator("> summary")
    summary.scroll_into_view_if_needed()
    box = summary.bounding_box()
    page.mouse.move(box["x"] + 10, box["y"] + box["height"] / 2)

    page.mouse.down()  # the designer presses; a turn ends before they let go
    with page.expect_response(lambda answer: "fragment=memories" in answer.url):
        play(agent, {"say": "The bell rings."})
    page.mouse.up()

    page.wait_for_function("window.replaced.filter((name) => name === 'memories').length >= 2")
    expect(deleted.locator('[data-change="deleted"]')).to_be_visible()


@pytest.mark.parametrize("width", [1280, 900])
def test_the_memories_page_reads_well_at_laptop_and_narrow_widths(signed_in, agent, width):
    populate(agent)
    signed_in.set_viewport_size({"width": width, "height": 900})

    signed_in.goto(memories_url(agent))
    wait_until_live(signed_in)

    expect(signed_in.locator("[data-memory]")).to_have_count(2)
    deleted = signed_in.locator('[data-deleted-memory="inventory"]')
    deleted.locator("> summary").click()
    expect(deleted.locator('[data-change="deleted"]')).to_be_visible()
    expect(deleted.locator('[data-change="created"]')).to_contain_text("A lantern, a rope.")
    expect(signed_in.locator('[data-memory-card="quest"] [data-change="dropped"]')).to_contain_text(
        "the memory was written after the compactor read it"
    )
    rewrite = signed_in.locator('[data-memory-card="quest"] [data-change="updated"][data-by="compactor"]')
    expect(rewrite.locator("pre.diff ins").first).to_have_text(" now knows")
    assert_no_sideways_scroll(signed_in)


def test_a_memory_off_agent_says_how_to_turn_memory_on(signed_in, define):
    agent = define("narrator", memory_enabled=False)

    signed_in.goto(memories_url(agent))

    expect(signed_in.locator("[data-memory-off]")).to_contain_text("Memory is off for narrator.")
    expect(signed_in.locator("[data-memory-off]")).to_contain_text("memory: {}")


# --- billing ------------------------------------------------------------------------------------------


def spend(agent):
    play(agent, call("close_memory", **QUEST), {"say": "Noted."})
    play(agent, call("open_memory", name="quest"), call("open_memory", name="nothing"))
    with transaction.atomic():
        ledger.charge_compaction(
            game_id=agent.game_id,
            agent_name=agent.name,
            compaction_id=uuid.uuid4(),
            model="scripted",
            usage=ledger.Usage(input_tokens=2400, output_tokens=600),
        )


@pytest.mark.parametrize("width", [1280, 900])
def test_the_billing_page_shows_the_balance_and_the_lines(page, member, agent, width):
    spend(agent)
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, member)

    page.goto(f"/studio/{agent.game.slug}/billing/")

    balance = ledger.account_summary(agent.game)["balance"]
    expect(page.locator("[data-balance] .amount")).to_have_attribute("title", f"{balance} credits")
    expect(page.locator("[data-line]")).to_have_count(5)  # two turns' Model and Memory access, a compaction
    expect(page.locator('svg[data-chart="spend"] rect.kind-model')).to_have_count(1)
    expect(page.get_by_role("heading", name="Adjust the budget")).to_have_count(0)
    assert_no_sideways_scroll(page)


def test_a_turns_link_opens_its_breakdown(page, member, agent):
    spend(agent)
    sign_in(page, member)
    page.goto(f"/studio/{agent.game.slug}/billing/")

    page.locator('[data-line-kind="memory_access"] a').first.click()

    breakdown = page.locator("[data-turn-breakdown]")
    expect(breakdown).to_be_visible()
    expect(breakdown.locator("[data-line-kind]")).to_have_count(2)
    expect(breakdown).to_contain_text("0.001 per call")
    expect(page).to_have_url(re.compile(r"\?turn=[0-9a-f-]{36}$"))


def test_staff_adjust_the_budget_and_see_the_new_balance(page, staff_member, agent):
    sign_in(page, staff_member)
    page.goto(f"/studio/{agent.game.slug}/billing/")
    expect(page.locator("[data-balance]")).to_have_text("100.00")
    form = page.locator("form[action$='/billing/adjustments/']")

    form.get_by_label("Amount").fill("250")
    form.get_by_role("button", name="Adjust").click()
    expect(form.locator("[data-field-error=reason]")).to_have_text(re.compile("Give a reason"))
    expect(form.get_by_label("Reason")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("[data-balance]")).to_have_text("100.00")

    form.get_by_label("Reason").fill("Top-up for the playtest weekend")
    form.get_by_role("button", name="Adjust").click()

    expect(form.locator("[data-result]")).to_have_text(
        "Adjusted by +250.00 credits. The balance is now 350.00."
    )
    expect(page.locator("[data-balance]")).to_have_text("350.00")
    expect(page.locator("[data-adjustment]").first).to_contain_text("Top-up for the playtest weekend")
    expect(page.locator("[data-adjustment]").first).to_contain_text("sam")
    expect(form.get_by_label("Amount")).to_have_value("")


def test_staff_remove_a_cap(page, staff_member, agent):
    ledger.limits_set(game=agent.game, monthly_cap=50)
    sign_in(page, staff_member)
    page.goto(f"/studio/{agent.game.slug}/billing/")
    expect(page.locator('[data-meter="monthly-cap"]')).to_be_visible()
    form = page.locator("form[action$='/billing/limits/']")

    form.get_by_role("button", name="Remove cap").click()

    expect(page.locator("[data-no-cap]")).to_be_visible()
    expect(form.get_by_label("Most the game may spend in a month")).to_have_value("")


def test_an_admin_sets_a_monthly_cap_and_a_low_balance_alert_but_adjusts_no_credits(
    page, admin_member, agent
):
    spend(agent)
    sign_in(page, admin_member)
    page.goto(f"/studio/{agent.game.slug}/billing/")
    expect(page.locator("[data-no-cap]")).to_be_visible()
    expect(page.locator("form[action$='/billing/adjustments/']")).to_have_count(0)
    form = page.locator("form[action$='/billing/limits/']")
    expect(form.get_by_role("button", name="Remove cap")).to_have_count(0)

    form.get_by_label("Most the game may spend in a month").fill("0.02")
    form.get_by_role("button", name="Save cap").click()

    expect(form.locator("[data-result]")).to_have_text("The monthly cap is now 0.02 credits.")
    expect(page.locator('[data-meter="monthly-cap"]')).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "billing-admin-with-cap.png"), full_page=True)

    form.get_by_label("Most the game may spend in a month").fill("5")
    form.get_by_role("button", name="Save cap").click()
    expect(form.locator("[data-result]")).to_contain_text("operators (its staff users) raise or remove")

    alert = page.locator("form[action$='/billing/alert/']")
    alert.get_by_label("Alert when the balance falls below").fill("50")
    alert.get_by_role("button", name="Save alert").click()
    expect(page.locator("[data-low-balance-alert]")).to_have_text("alert below 50.00")

    alert.get_by_role("button", name="Turn off").click()
    expect(page.locator("[data-low-balance-alert]")).to_have_count(0)
    expect(alert.get_by_label("Alert when the balance falls below")).to_have_value("")
