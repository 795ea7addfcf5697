"""A game tool call on the agent page and in the history API: a waiting call
shown live as waiting for the game (its arguments, its deadline), the block
waiting with it; an answered call shown as any call; the definition form
editing the tools."""

import json
import re

import pytest

from agents.models import Agent
from tests.support.pages import CONFIG, html

from ..conftest import call, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/studio/ashmere/agents/dm/"
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


def waiting_turn(api) -> dict:
    sent = api.post(
        f"{DM}/messages",
        {"content": script(call("give_item", item="the silver key"), {"say": "Here is your key."})},
        format="json",
    )
    assert sent.status_code == 202, sent.content
    return sent.json()["turn"]


def history_fragment(designer) -> str:
    return html(designer.get(PAGE + "?fragment=history"))


def test_a_waiting_call_is_shown_as_waiting_for_the_game_with_its_deadline(api, designer, innkeeper):
    turn = waiting_turn(api)
    [pending] = turn["pendingToolCalls"]

    page = history_fragment(designer)

    assert 'data-status="waiting"' in page
    waiting = re.search(r'<div class="tool-call is-waiting"[^>]*>(.*?)</div>\s*</div>', page, re.S)
    assert waiting, page
    said = " ".join(re.sub(r"<[^>]+>", " ", waiting.group(1)).split())
    assert 'Waiting for the game: give_item {"item": "the silver key"}' in said.replace("&quot;", '"')
    assert f'datetime="{pending["deadline"]}"' in waiting.group(1)
    assert "it has 600 s" in said
    assert f'data-waiting-for-game="{pending["callId"]}"' in page
    assert "Working — new tool calls appear" not in page
    assert "data-waiting-note" in page
    # Not "as of" a block still being played.
    assert f"{PAGE}blocks/{turn['block']}/" not in page


def test_an_answered_call_shows_its_result_like_any_call(api, designer, innkeeper):
    turn = waiting_turn(api)
    call_id = turn["pendingToolCalls"][0]["callId"]

    api.post(f"{DM}/turns/{turn['id']}/tool-results", {"callId": call_id, "result": "given"}, format="json")
    wait_for(lambda: api.get(f"{DM}/turns/{turn['id']}").json()["turn"]["status"] == "completed", timeout=30)

    page = history_fragment(designer)
    assert 'data-status="completed"' in page and "is-waiting" not in page
    assert re.search(r'data-tool-call="give_item".*?<pre class="tool-output">given</pre>', page, re.S)
    assert "Here is your key." in page


def test_the_history_and_the_timeline_refresh_on_game_tool_events(api, designer, innkeeper):
    page = html(designer.get(PAGE))

    for fragment in ("history", "timeline"):
        live_on = re.search(rf'data-live-fragment="{fragment}" data-live-on="([^"]*)"', page).group(1).split()
        assert {"tool.requested", "tool.answered"} <= set(live_on), fragment


def test_the_timeline_shows_a_waiting_block_as_waiting(api, designer, innkeeper):
    waiting_turn(api)

    assert re.search(
        r'class="tl-block tl-waiting[^"]*"[^>]*data-timeline-block="1"', html(designer.get(PAGE))
    )


def test_the_history_api_shows_a_waiting_call_deliberately(api, innkeeper):
    turn = waiting_turn(api)
    [pending] = turn["pendingToolCalls"]

    [block] = api.get(f"{DM}/history").json()["blocks"]

    assert block["status"] == "waiting"
    waiting = block["entries"][1]
    assert waiting == {
        "type": "tool_call",
        "name": "give_item",
        "arguments": {"item": "the silver key"},
        "result": None,
        "isError": False,
        "waitingForGame": {
            "callId": pending["callId"],
            "deadline": pending["deadline"],
            "timeoutSeconds": 600,
        },
    }
    api.post(
        f"{DM}/turns/{turn['id']}/tool-results", {"callId": pending["callId"], "result": "ok"}, format="json"
    )
    wait_for(lambda: api.get(f"{DM}/history").json()["blocks"][0]["status"] == "completed", timeout=30)
    answered = api.get(f"{DM}/history").json()["blocks"][0]["entries"][1]
    assert answered == {
        "type": "tool_call",
        "name": "give_item",
        "arguments": {"item": "the silver key"},
        "result": "ok",
        "isError": False,
    }


def test_sending_from_the_page_says_the_turn_waits_for_the_game(designer, innkeeper):
    response = designer.post(
        PAGE + "send/", {"content": script(call("give_item", item="ale"), {"say": "Cheers."})}
    )

    assert response.status_code == 200
    body = response.json()
    assert body["turn"]["status"] == "waiting"
    assert body["message"].startswith("Block 1 waits for the game to answer give_item")


# --- the definition form --------------------------------------------------------------------


def test_the_config_form_edits_the_tools(designer, agent):
    response = designer.post(PAGE, {**CONFIG, "tools": json.dumps([GIVE])})

    assert response.status_code == 302, html(response)
    assert Agent.objects.get(pk=agent.pk).tools == [GIVE]
    shown = html(designer.get(PAGE))
    assert "give_item" in re.search(r'<textarea name="tools".*?</textarea>', shown, re.S).group(0)

    cleared = designer.post(PAGE, {**CONFIG, "tools": "[]"})

    assert cleared.status_code == 302
    assert Agent.objects.get(pk=agent.pk).tools == []


@pytest.mark.parametrize(
    "tools, said",
    [
        ([GIVE, GIVE], "two tools are named &#x27;give_item&#x27;"),
        ([{**GIVE, "name": "open_memory"}], "the studio&#x27;s own tool"),
        ({"name": "give_item"}, "&#x27;tools&#x27; is a list"),
    ],
)
def test_the_config_form_refuses_a_bad_tool_saying_why_next_to_the_field(designer, agent, tools, said):
    response = designer.post(PAGE, {**CONFIG, "tools": json.dumps(tools)})

    assert response.status_code == 400
    assert re.search(
        rf'<textarea name="tools".*?<ul class="errorlist"[^>]*><li>[^<]*{said}', html(response), re.S
    )
    assert Agent.objects.get(pk=agent.pk).tools == []


def test_the_config_form_refuses_tools_that_are_not_json(designer, agent):
    response = designer.post(PAGE, {**CONFIG, "tools": "[{name: give_item}"})

    assert response.status_code == 400
    assert re.search(
        r'<textarea name="tools".*?<ul class="errorlist"[^>]*><li>Enter a valid JSON', html(response), re.S
    )
