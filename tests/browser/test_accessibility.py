"""Every studio page passes an automated WCAG 2 A/AA check: axe-core, run in
Chromium on the page as a user sees it (every <details> opened), finds no
serious or critical violation. axe-core's script comes with the
axe-playwright-python package, so the check needs no network."""

import pytest
from playwright.sync_api import expect

from agents.compaction import compaction_request
from agents.models import Agent, CompactionReason
from billing.models import Account
from tests.conftest import UNTIL_CANCELLED, call, in_thread, script
from tests.support.accessibility import Audit
from tests.support.agent_file import exported as read_export
from tests.support.browser import play, populate, wait_until_live
from tests.support.sending import turn_send

from .conftest import sign_in, sign_in_with_the_form

pytestmark = pytest.mark.django_db(transaction=True)

AGENT_PAGE = "/studio/ashmere/agents/dm/"
# Long enough to overflow every capped text box it lands in.
JOURNAL = {
    "name": "journal",
    "description": "What happened each day in Ashmere",
    "content": "\n".join(f"Day {day}: the bells rang {day} times at dusk." for day in range(1, 61)),
}


@pytest.fixture
def audit(page):
    return Audit(page)


@pytest.fixture
def story(agent):
    """An agent with a history worth reading: tool calls (one an error),
    memories rewritten by the agent and the compactor and one deleted, a
    long open memory rewritten in its middle, a failed turn, a checkpoint whose context block
    overflows its box, and more blocks than one page of history shows."""
    populate(agent)
    play(agent, call("close_memory", **JOURNAL), call("open_memory", name="journal"))
    rewritten = JOURNAL["content"].replace("Day 30: the bells rang 30", "Day 30: the bells were silent")
    play(
        agent, call("close_memory", **{**JOURNAL, "content": rewritten}), call("open_memory", name="journal")
    )
    play(agent, call("open_memory", name="nothing"), {"say": "Nothing by that name."})
    for n in range(16):
        play(agent, {"say": f"Bell {n + 1} rings."})
    compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    turn_send(agent=agent, content=script({"fail": "The model went quiet."}))
    play(
        agent, call("close_memory", name="quest", description="Where the key is", content="Under the altar.")
    )
    return agent


def submit(form, button: str, **fields: str) -> None:
    """Fill the fields (by label) and press the button."""
    for label, value in fields.items():
        form.get_by_label(label).fill(value)
    form.get_by_role("button", name=button).click()


def test_sign_in_and_the_games_list_have_no_serious_violation(page, audit, member):
    page.goto("/")
    audit.check("the landing page")
    page.goto("/studio/login/")
    audit.check("sign-in")
    submit(page, "Sign in", Username="mara", Password="not it")
    expect(page.get_by_role("alert")).to_be_visible()
    audit.check("sign-in, wrong password")
    sign_in_with_the_form(page, member)
    audit.check_narrow_and_wide("your games")
    audit.assert_clean()


def test_a_new_games_agent_pages_have_no_serious_violation(page, audit, member):
    sign_in(page, member)
    page.goto("/studio/ashmere/")
    expect(page.locator("[data-empty=failures]")).to_be_visible()
    audit.check("overview, a new game")
    page.goto("/studio/ashmere/agents/")
    expect(page.get_by_role("heading", name="No agents yet")).to_be_visible()
    audit.check("agents list, empty")
    submit(page, "Create agent", Name="not a name!")
    expect(page.locator(".errorlist")).to_be_visible()
    audit.check("agents list, a form error")
    submit(page, "Create agent", Name="dm")
    expect(page.locator(".flash")).to_be_visible()
    wait_until_live(page)
    audit.check("a new agent's page")
    audit.assert_clean()


def test_an_agent_with_history_has_no_serious_violation_on_its_pages(page, audit, member, story, game):
    sign_in(page, member)
    page.goto("/studio/ashmere/")
    expect(page.locator("[data-failure]").first).to_be_visible()
    audit.check_narrow_and_wide("overview")
    Account.objects.filter(game=game).update(balance=0)
    page.goto("/studio/")
    expect(page.locator("[data-funding=none]")).to_be_visible()
    audit.check("your games, a game whose sends are refused")
    page.goto("/studio/ashmere/agents/")
    expect(page.locator("[data-send-refused]")).to_be_visible()
    audit.check_narrow_and_wide("agents list, sends refused")
    Account.objects.filter(game=game).update(balance=100)
    page.goto("/studio/ashmere/agents/")
    audit.check_narrow_and_wide("agents list")

    page.goto(AGENT_PAGE)
    wait_until_live(page)
    expect(page.locator("[data-context-block]")).to_contain_text("Day 60")
    expect(page.locator("[data-tool-call]").first).to_be_visible()
    audit.check_narrow_and_wide("agent page")

    page.get_by_role("link", name="Older blocks →").click()
    expect(page.locator(".fold-line")).to_be_visible()
    audit.check("agent page, older blocks")

    page.goto(AGENT_PAGE)
    wait_until_live(page)
    box = page.locator(".send-box")
    box.get_by_label("What the player says").fill(script(UNTIL_CANCELLED))
    box.get_by_role("button", name="Send").click()
    running = page.locator("article.block[data-status=running]")
    expect(running).to_be_visible()
    audit.check("agent page, a turn running")
    running.get_by_role("button", name="Cancel").click()
    expect(box.locator("[data-result]")).to_contain_text("The turn was cancelled.")
    audit.check("agent page, a turn cancelled")

    submit(page.locator("#config"), "Save config", maxOpenTokens="20000")
    expect(page.locator("[data-definition-error]")).to_be_visible()
    audit.check("agent page, a config error")
    audit.assert_clean()


def test_the_pages_through_time_have_no_serious_violation(page, audit, member, admin_member, lived, tmp_path):
    sign_in(page, member)
    page.goto(AGENT_PAGE + "blocks/5/")
    expect(page.locator("[data-memory]")).to_have_count(2)
    audit.check_narrow_and_wide("as of a block")
    submit(page.locator("#fork"), "Fork from here", **{"Name of the new agent": "dm"})
    expect(page.locator("#fork .errorlist")).to_be_visible()
    audit.check("as of a block, a fork error")
    Agent.objects.filter(name="dm").update(recorded_from_block=3)
    page.goto(AGENT_PAGE + "blocks/2/")
    expect(page.locator("[data-refusal]")).to_be_visible()
    audit.check("as of a block it cannot show")
    page.goto(AGENT_PAGE + "checkpoints/")
    expect(page.locator("[data-rewrite]")).to_have_count(1)
    audit.check_narrow_and_wide("checkpoints")

    page.context.clear_cookies()
    sign_in(page, admin_member)
    page.goto("/studio/ashmere/agents/")
    audit.check("agents list, admin, with the import form")
    not_a_file = tmp_path / "notes.json"
    not_a_file.write_text("the bells ring at dusk")
    form = page.locator("#import-agent")
    form.get_by_label("Agent file").set_input_files(not_a_file)
    form.get_by_role("button", name="Import").click()
    expect(page.locator("#import-agent [data-field-error=file]")).to_be_visible()
    audit.check("agents list, an import error")
    submit(page.locator("#default-model"), "Save default model", **{"This game's default model": "gpt-4o"})
    expect(page.locator("#default-model .field-error")).to_be_visible()
    audit.check("agents list, a default model error")
    audit.assert_clean()


def test_the_memories_pages_have_no_serious_violation(page, audit, member, story, define, api, admin_api):
    define("narrator", memory_enabled=False)

    def imported() -> int:  # the export streams through async code: not on the browser's loop
        exported = read_export(api.get("/api/v1/agents/dm/export"))
        made = admin_api.post(
            "/api/v1/agents/import?fileName=dm.json", {**exported, "name": "dm-b"}, format="json"
        )
        return made.status_code

    thread, box = in_thread(imported)
    thread.join(30)
    assert box.get("result") == 201, box
    sign_in(page, member)
    page.goto(AGENT_PAGE + "memories/")
    wait_until_live(page)
    expect(page.locator('[data-memory="journal"]')).to_be_visible()
    audit.check_narrow_and_wide("memories page")
    page.goto("/studio/ashmere/agents/dm-b/memories/")
    expect(page.locator("[data-file-history]").first).to_be_visible()
    audit.check_narrow_and_wide("memories page, an imported agent")
    page.goto("/studio/ashmere/agents/narrator/memories/")
    expect(page.locator("[data-memory-off]")).to_be_visible()
    audit.check("memories page, memory off")
    audit.assert_clean()


def test_the_billing_page_has_no_serious_violation_for_designers_admins_or_staff(
    page, audit, member, admin_member, staff_member, story
):
    sign_in(page, member)
    page.goto("/studio/ashmere/billing/")
    expect(page.locator("[data-line]").first).to_be_visible()
    audit.check_narrow_and_wide("billing, designer")
    page.locator('[data-line-kind="memory_access"] a').first.click()
    expect(page.locator("[data-turn-breakdown]")).to_be_visible()
    audit.check("billing, a turn's breakdown")
    page.goto("/studio/ashmere/billing/?turn=not-a-turn")
    audit.check("billing, a bad filter")

    page.context.clear_cookies()
    sign_in(page, admin_member)
    page.goto("/studio/ashmere/billing/")
    submit(
        page.locator("form[action$='/billing/alert/']"),
        "Save alert",
        **{"Alert when the balance falls below": "-1"},
    )
    expect(page.locator("form[action$='/billing/alert/'] [data-field-error]")).to_contain_text(
        "cannot be negative"
    )
    audit.check_narrow_and_wide("billing, admin, an alert error")

    page.context.clear_cookies()
    sign_in(page, staff_member)
    page.goto("/studio/ashmere/billing/")
    adjust = page.locator("form[action$='/billing/adjustments/']")
    submit(adjust, "Adjust", Amount="25")
    expect(adjust.locator("[data-field-error=reason]")).to_contain_text("Give a reason")
    audit.check("billing, staff, a form error")
    submit(adjust, "Adjust", Reason="Top-up for the playtest weekend")
    expect(page.locator("[data-adjustment]")).to_have_count(1)
    cap = {"Most the game may spend in a month": "0.02"}
    submit(page.locator("form[action$='/billing/limits/']"), "Save cap", **cap)
    expect(page.locator('[data-meter="monthly-cap"]')).to_be_visible()
    audit.check_narrow_and_wide("billing, staff, with a cap and an adjustment")
    audit.assert_clean()
