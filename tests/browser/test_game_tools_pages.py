"""A call of a game tool on the agent page, in Chromium: shown live as
waiting for the game (the tool, its arguments, its deadline) while the turn
waits; the game's answer, posted through the API, makes its result appear
and the reply arrive without a reload. And the definition form's tools."""

import json
import re

import pytest
from playwright.sync_api import expect

from agents.models import Agent
from tests.conftest import call, script
from tests.support.browser import block, open_live

from .conftest import ARTIFACTS

pytestmark = pytest.mark.django_db(transaction=True)

DM = "/api/v1/agents/dm"
GIVE = {
    "name": "give_item",
    "description": "Hand the player an item from the innkeeper's stock.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    "timeoutSeconds": 600,
}


@pytest.fixture
def innkeeper(api, game):
    response = api.put(
        DM, {"systemPrompt": "You keep the inn.", "memory": {}, "tools": [GIVE]}, format="json"
    )
    assert response.status_code == 201, response.content


def test_a_waiting_call_shows_live_and_the_games_answer_brings_the_reply(signed_in, api, innkeeper):
    page = signed_in
    open_live(page)
    page.evaluate("window.notReloaded = true")
    box = page.locator(".send-box")

    box.get_by_label("What the player says").fill(
        script(call("give_item", item="the silver key"), {"say": "Here is your key."})
    )
    box.get_by_role("button", name="Send").click()

    waiting = block(page, 1).locator("[data-tool-call=give_item].is-waiting")
    expect(waiting).to_contain_text('Waiting for the game: give_item {"item": "the silver key"}')
    expect(waiting).to_contain_text("The game answers by")
    expect(waiting.locator("time")).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT"))
    expect(block(page, 1).locator(".badge-waiting").first).to_be_visible()
    expect(box.locator("[data-result]")).to_contain_text("Block 1 waits for the game to answer give_item")
    page.screenshot(path=str(ARTIFACTS / "agent-page-waiting-for-the-game.png"), full_page=True)

    turn = api.get(f"{DM}/turns?status=waiting").json()["turns"][0]
    call_id = turn["pendingToolCalls"][0]["callId"]
    answered = api.post(
        f"{DM}/turns/{turn['id']}/tool-results",
        {"callId": call_id, "result": "given: the silver key"},
        format="json",
    )
    assert answered.status_code == 200

    given = block(page, 1).locator("[data-tool-call=give_item]")
    expect(given.locator(".tool-output")).to_have_text("given: the silver key")
    expect(block(page, 1).locator(".is-waiting")).to_have_count(0)
    expect(block(page, 1)).to_have_attribute("data-status", "completed")
    expect(block(page, 1)).to_contain_text("Here is your key.")
    expect(box.locator("[data-reply]")).to_have_text("Here is your key.")
    assert page.evaluate("window.notReloaded") is True


def test_each_answer_shows_live_while_the_turn_still_waits_on_another_call(
    signed_in, api, innkeeper, agent_row, monkeypatch
):
    from agents.providers.base import ModelReply, ToolCall, Usage
    from agents.providers.scripted import ScriptedProvider

    original = ScriptedProvider.complete

    def both(self, request, control):  # two calls in one step, then the script's reply
        if any(m["role"] == "tool" for m in request.messages):
            return original(self, request, control)
        calls = [ToolCall("c1", "give_item", {"item": "ale"}), ToolCall("c2", "give_item", {"item": "bread"})]
        return ModelReply(text=None, tool_calls=calls, usage=Usage(10, 5))

    monkeypatch.setattr(ScriptedProvider, "complete", both)
    page = signed_in
    open_live(page)
    page.evaluate("window.notReloaded = true")

    # Sent by game code through the API: it runs in this process, its events reach the page.
    turn = send_by_api(api, agent_row, script({"say": "Ale and bread, then."}))
    calls = block(page, 1).locator("[data-tool-call=give_item]")
    expect(calls.nth(0)).to_contain_text('Waiting for the game: give_item {"item": "ale"}')
    expect(calls.nth(1)).to_contain_text('Waiting for the game: give_item {"item": "bread"}')

    answer(api, turn, "c1", "one ale")

    # Only tool.answered says so: the turn still waits on c2, nothing else happens meanwhile.
    expect(calls.nth(0).locator(".tool-output")).to_have_text("one ale")
    expect(calls.nth(1)).to_have_class(re.compile("is-waiting"))
    expect(block(page, 1)).to_have_attribute("data-status", "waiting")

    answer(api, turn, "c2", "one loaf")

    expect(calls.nth(1).locator(".tool-output")).to_have_text("one loaf")
    expect(block(page, 1)).to_contain_text("Ale and bread, then.")
    expect(block(page, 1)).to_have_attribute("data-status", "completed")
    assert page.evaluate("window.notReloaded") is True


def send_by_api(api, agent_row, content) -> dict:
    sent = api.post(f"{DM}/messages", {"content": content}, format="json")
    assert sent.status_code == 202, sent.content
    return sent.json()["turn"]


def answer(api, turn, call_id, result):
    response = api.post(
        f"{DM}/turns/{turn['id']}/tool-results", {"callId": call_id, "result": result}, format="json"
    )
    assert response.status_code == 200, response.content


@pytest.fixture
def agent_row(game):
    return lambda: Agent.objects.get(game=game, name="dm")


def test_the_definition_form_edits_the_tools_and_refuses_a_bad_one(signed_in, agent):
    page = signed_in
    page.goto("/studio/ashmere/agents/dm/")
    config = page.locator("#config")
    tools = config.get_by_label("Game tools")

    tools.fill(json.dumps([GIVE, GIVE]))
    config.get_by_role("button", name=re.compile("Save")).click()

    expect(config.locator(".errorlist")).to_contain_text("two tools are named 'give_item'")
    assert Agent.objects.get(pk=agent.pk).tools == []

    config.get_by_label("Game tools").fill(json.dumps([GIVE]))
    config.get_by_role("button", name=re.compile("Save")).click()

    expect(page.locator(".flash")).to_contain_text("Saved")
    assert Agent.objects.get(pk=agent.pk).tools == [GIVE]
    expect(page.locator(".context-card")).to_contain_text("give_item")
