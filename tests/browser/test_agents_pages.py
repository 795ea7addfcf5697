"""The Agents surface in a real browser: the list, an agent's page, its live
history, sending as the player, the config form, cancel and compact."""

import re

import pytest
from playwright.sync_api import expect

from agents.models import Agent, Block
from billing.models import ModelPrice
from tests.conftest import UNTIL_CANCELLED, call, script
from tests.support import fake_openai as openai_answers
from tests.support.browser import block, open_live
from tests.support.fake_openai import fake_openai_fixture  # noqa: F401 — the `fake_openai` fixture
from tests.support.sending import turn_send

from .conftest import ARTIFACTS

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/studio/ashmere/agents/dm/"
QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the silver key."}


def history(page):
    return page.locator("[data-live-fragment=history]")


def screenshot_at(page, width, name):
    """A full-page screenshot at another width (the fixture takes the 1366 one)."""
    page.set_viewport_size({"width": width, "height": 900})
    page.screenshot(path=str(ARTIFACTS / f"{name}-{width}.png"), full_page=True)


def test_the_agents_list_helps_create_the_first_agent(signed_in):
    page = signed_in
    page.goto("/studio/ashmere/agents/")
    expect(page.get_by_role("heading", name="No agents yet")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "agents-list-empty.png"), full_page=True)

    page.get_by_label("Name").fill("dm")
    page.get_by_role("button", name="Insert a starter memory section").click()
    page.get_by_role("button", name="Create agent").click()

    expect(page).to_have_url(re.compile(r"/studio/ashmere/agents/dm/$"))
    expect(page.locator(".flash")).to_contain_text("Agent 'dm' is defined")
    assert "`quest` open at all times" in Agent.objects.get(name="dm").system_prompt


def test_the_agents_list_shows_each_agent(signed_in, define):
    dm = define("dm", system_prompt="You are the dungeon master. Keep `quest` open.")
    define("innkeeper", memory_enabled=False, compaction_type="sliding-window", max_tokens=8000)
    turn_send(agent=dm, content=script(call("close_memory", **QUEST), {"say": "Noted."}))
    page = signed_in

    page.goto("/studio/ashmere/agents/")

    expect(page.locator("tr[data-agent]")).to_have_count(2)
    expect(page.locator("tr[data-agent=innkeeper]")).to_contain_text("Sliding window")
    screenshot_at(page, 1280, "agents-list")
    screenshot_at(page, 900, "agents-list")
    page.locator("tr[data-agent=dm]").get_by_role("link", name="dm").click()
    expect(page.get_by_role("heading", name="dm", exact=True)).to_be_visible()


def test_the_agent_page_shows_config_context_and_history(signed_in, agent):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), {"say": "I will remember."}))
    turn_send(agent=agent, content=script(call("open_memory", name="npcs"), {"say": "Hmm."}))
    page = signed_in

    open_live(page)

    expect(page.locator("#config-system_prompt")).to_have_value("You are the dungeon master.")
    expect(page.locator(".context-card")).to_contain_text("You are the dungeon master.")
    expect(page.locator(".context-card")).to_contain_text("no context block before the first compaction")
    expect(block(page, 2).locator("[data-tool-call=open_memory]")).to_have_class(re.compile("is-error"))
    expect(block(page, 1).locator("[data-tool-call=close_memory]")).to_contain_text("Find the silver key.")
    expect(block(page, 1).locator("tr[data-cost=memory_access]")).to_contain_text("1 call")
    expect(page.get_by_role("link", name="Memories →")).to_have_attribute("href", PAGE + "memories/")
    screenshot_at(page, 1280, "agent-page")
    screenshot_at(page, 900, "agent-page")


def test_a_tool_call_appears_live(signed_in, agent):
    page = signed_in
    open_live(page)
    expect(history(page)).to_contain_text("No blocks yet")

    turn_send(agent=agent, content=script(call("close_memory", **QUEST), {"say": "Noted."}))

    expect(history(page).locator("[data-tool-call=close_memory]")).to_be_visible()
    expect(block(page, 1)).to_contain_text("Noted.")
    expect(page.locator(".context-card [data-tool-call=close_memory]")).to_be_visible()


def test_sending_as_the_player_normally_and_transiently(signed_in, agent):
    page = signed_in
    open_live(page)
    box = page.locator(".send-box")

    box.get_by_label("What the player says").fill("I push open the chapel door.")
    box.get_by_role("button", name="Send").click()

    expect(block(page, 1)).to_contain_text("I push open the chapel door.")
    expect(box.locator("[data-result]")).to_contain_text("Block 1 —")
    expect(box.get_by_label("What the player says")).to_have_value("")

    box.get_by_label("What the player says").fill("Who is the ferryman?")
    box.get_by_label("Transient").check()
    box.get_by_role("button", name="Send").click()

    expect(box.locator("[data-result]")).to_contain_text("Transient reply — not kept in history")
    expect(box.locator("[data-result]")).to_contain_text("Who is the ferryman?")
    expect(history(page).locator("article.block")).to_have_count(1)
    assert Block.objects.count() == 1


def test_the_definition_error_is_shown_next_to_the_fields(signed_in, agent):
    page = signed_in
    page.goto(PAGE)
    config = page.locator("#config")

    config.get_by_label("maxOpenTokens").fill("4000")
    config.get_by_label("maxTokens").fill("8000")
    config.get_by_label("System prompt").fill("A prompt I want to keep.")
    config.get_by_role("button", name="Save config").click()

    error = page.locator("[data-definition-error]")
    expect(error).to_contain_text("maxOpenTokens (4,000)")
    expect(error).to_contain_text("maxTokens (8,000)")
    expect(config.get_by_label("maxTokens")).to_have_value("8000")
    expect(config.get_by_label("System prompt")).to_have_value("A prompt I want to keep.")
    error.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "agent-config-error.png"))

    config.get_by_label("maxOpenTokens").fill("1000")
    config.get_by_role("button", name="Save config").click()
    expect(page.locator(".flash")).to_contain_text("Saved.")
    expect(page.locator(".agent-summary")).to_contain_text("maxTokens 8,000")


def test_the_prompting_help_warns_and_inserts_a_starter_section(signed_in, agent):
    page = signed_in
    page.goto(PAGE)
    config = page.locator("#config")
    hint = config.locator("[data-memory-hint]")

    expect(hint).to_be_visible()
    config.get_by_role("button", name="Insert a starter memory section").click()
    expect(hint).to_be_hidden()
    expect(config.get_by_label("System prompt")).to_have_value(
        re.compile(r"^You are the dungeon master\.\n\n## Memory")
    )
    config.get_by_label("Give the agent memory tools").uncheck()
    config.get_by_label("System prompt").fill("Just a prompt.")
    expect(hint).to_be_hidden()
    config.get_by_label("Give the agent memory tools").check()
    expect(hint).to_be_visible()


def test_a_running_turn_is_cancelled_from_the_page(signed_in, agent):
    page = signed_in
    open_live(page)
    box = page.locator(".send-box")

    box.get_by_label("What the player says").fill(script(UNTIL_CANCELLED))
    box.get_by_role("button", name="Send").click()
    expect(box.get_by_role("button", name="Send")).to_be_disabled()
    running = block(page, 1)
    expect(running).to_have_attribute("data-status", "running")
    page.screenshot(path=str(ARTIFACTS / "agent-running-turn.png"), full_page=True)
    running.get_by_role("button", name="Cancel").click()

    expect(block(page, 1)).to_have_attribute("data-status", "cancelled")
    expect(box.locator("[data-result]")).to_contain_text("The turn was cancelled.")
    expect(box.get_by_role("button", name="Send")).to_be_enabled()


def test_compact_now_folds_the_history_into_a_checkpoint(signed_in, agent):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), {"say": "Noted."}))
    turn_send(agent=agent, content=script(call("open_memory", name="quest"), {"say": "Open."}))
    turn_send(agent=agent, content="What now?")
    page = signed_in
    open_live(page)

    page.get_by_role("button", name="Compact now").click()

    expect(page.locator(".compact-form [data-result]")).to_contain_text("Compacted: blocks through 2")
    checkpoint = page.locator("[data-live-fragment=checkpoint]")
    expect(checkpoint).to_contain_text("Folds blocks 1–2")
    expect(checkpoint).to_contain_text("Find the silver key.")
    expect(block(page, 2)).to_have_class(re.compile("folded"))
    expect(block(page, 3)).not_to_have_class(re.compile("folded"))
    expect(page.locator("[data-live-fragment=compactions] tr[data-status=done]")).to_have_count(1)
    expect(page.locator("[data-context-block]")).to_contain_text(
        "## Open memories — current as of this point"
    )
    screenshot_at(page, 1280, "agent-after-compaction")


def test_the_reply_appears_word_by_word_as_it_is_written(signed_in, agent):
    words = "Once upon a time the bells rang out over the drowned chapel."
    page = signed_in
    open_live(page)
    box = page.locator(".send-box")

    box.get_by_label("What the player says").fill(script({"say": words, "sleep": 0.3}))
    box.get_by_role("button", name="Send").click()

    streaming = box.locator("[data-reply][data-reply-streaming=true]")
    expect(streaming).to_contain_text("Once upon a")
    partial = streaming.text_content()
    page.screenshot(path=str(ARTIFACTS / "agent-page-reply-streaming.png"), full_page=True)
    expect(box.locator("[data-result]")).to_contain_text(f"Block 1 — {words}")
    expect(box.locator("[data-reply-streaming]")).to_have_count(0)
    assert words.startswith(partial) and len(partial) < len(words)
    expect(block(page, 1)).to_contain_text(words)


def test_the_waiting_note_gives_way_to_the_words_as_they_arrive(signed_in, agent):
    page = signed_in
    open_live(page)
    box = page.locator(".send-box")

    box.get_by_label("What the player says").fill(
        script({"say": "The bells ring out over the water.", "sleep": 0.3})
    )
    box.get_by_role("button", name="Send").click()
    expect(box.locator("[data-result]")).to_have_text("Waiting for dm…")

    expect(box.locator("[data-reply][data-reply-streaming=true]")).to_contain_text("The bells")
    streaming, result = box.evaluate(
        "(box) => [box.querySelector('[data-reply]').dataset.replyStreaming,"
        " box.querySelector('[data-result]').textContent]"
    )
    assert (streaming, result) == ("true", "")
    expect(box.locator("[data-result]")).to_contain_text("Block 1 — The bells ring out over the water.")


def test_a_transient_reply_shows_once_and_the_transient_box_unticks(signed_in, agent):
    page = signed_in
    page.add_init_script(
        "window.turnsFinished = 0; document.addEventListener('studio:event', (e) => {"
        " if (e.detail.type === 'turn.finished') window.turnsFinished += 1; });"
    )
    open_live(page)
    box = page.locator(".send-box")

    box.get_by_label("What the player says").fill(script({"say": "The ferryman shrugs.", "sleep": 0.1}))
    box.get_by_label("Transient").check()
    box.get_by_role("button", name="Send").click()

    expect(box.locator("[data-result]")).to_contain_text("Transient reply — not kept in history")
    page.wait_for_function("window.turnsFinished >= 1")
    expect(box.locator("[data-reply]")).to_be_hidden()
    assert box.inner_text().count("The ferryman shrugs.") == 1
    expect(box.get_by_label("Transient")).not_to_be_checked()


def test_the_new_agent_form_warns_about_memory_only_once_a_prompt_is_typed(signed_in):
    page = signed_in
    page.goto("/studio/ashmere/agents/")
    form = page.locator("#new-agent")
    hint = form.locator("[data-memory-hint]")

    expect(hint).to_be_hidden()
    form.get_by_label("System prompt").fill("You are the ferryman.")
    expect(hint).to_be_visible()
    form.get_by_label("System prompt").fill("")
    expect(hint).to_be_hidden()


def test_the_model_field_offers_the_priced_models(signed_in):
    ModelPrice.objects.create(model="openai:gpt-4o-mini", input_per_mtok="0.15", output_per_mtok="0.6")
    page = signed_in
    page.goto("/studio/ashmere/agents/")
    model = page.locator("#new-agent").get_by_label("Model", exact=True)

    offered = model.evaluate("(input) => [...input.list.options].map((option) => option.value)")

    assert offered == ["openai:gpt-4o-mini", "scripted"]  # not the '*' row, which names no model
    model.fill("openai:gpt-4o-mini")
    page.get_by_label("Name").fill("ferryman")
    page.get_by_role("button", name="Create agent").click()
    expect(page.locator(".agent-summary")).to_contain_text("openai:gpt-4o-mini")


def test_a_failed_turn_appears_live_with_what_kind_of_failure_it_was(
    signed_in, define, fake_openai, studio_conf
):
    """The provider refuses the call (429): the block appears as the turn
    fails, its note led by the class of failure, the provider's words after."""
    ModelPrice.objects.create(model="openai:gpt-test", input_per_mtok="0.15", output_per_mtok="0.6")
    define("dm", model="openai:gpt-test")
    studio_conf(MODEL_MAX_RETRIES=0)
    fake_openai.always(
        openai_answers.error(429, "Rate limit reached for requests", code="rate_limit_exceeded")
    )
    page = signed_in
    open_live(page)

    turn = turn_send(agent=Agent.objects.get(name="dm"), content="I push open the chapel door.")

    assert turn.error_class == "rate_limited"
    note = block(page, 1).locator(".block-note")
    expect(note.locator("[data-error-class=rate_limited]")).to_have_text("rate-limited")
    expect(note).to_contain_text("Rate limit reached for requests")
