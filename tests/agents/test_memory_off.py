"""Memory off means off: an agent redefined without `memory` keeps its
store untouched but sees none of it — no tools, and from its next
compaction no memory sections in its context block — and the compactor
keeps none current. Turned on again, they all come back."""

import pytest

from ..conftest import call, script

pytestmark = pytest.mark.django_db(transaction=True)

DM = "/api/v1/agents/dm"
PROMPT = {"systemPrompt": "You are the dungeon master."}
QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the key."}
NPCS = {"name": "npcs", "description": "Who Mara met", "content": "The ferryman."}


def compact(api) -> dict:
    assert api.post(f"{DM}/compact").status_code == 202
    return api.get(f"{DM}/checkpoint").json()


def test_memory_off_shows_and_keeps_no_memory_and_on_again_brings_them_back(api, send):
    api.put(DM, {**PROMPT, "memory": {}}, format="json")
    send(
        script(call("close_memory", **QUEST), call("open_memory", name="quest"), call("close_memory", **NPCS))
    )
    store_before = api.get(f"{DM}/memories").json()["memories"]

    assert api.put(DM, PROMPT, format="json").status_code == 200  # memory off
    send("@memory quest: written by the compactor while memory is off")
    send("newest")
    checkpoint = compact(api)

    assert "## Open memories" not in checkpoint["contextBlock"]
    assert "## Closed memories" not in checkpoint["contextBlock"]
    assert "open_memory" not in checkpoint["contextBlock"]
    assert (checkpoint["openMemories"], checkpoint["closedMemories"]) == ([], [])
    memories = api.get(f"{DM}/memories").json()
    assert memories["memoryEnabled"] is False
    assert memories["memories"] == store_before  # untouched, the compactor's line ignored
    assert api.get(f"{DM}/context").json()["tools"] == []

    assert api.put(DM, {**PROMPT, "memory": {}}, format="json").status_code == 200  # on again
    send("back on")
    send("newest again")
    checkpoint = compact(api)

    assert "### quest — What the player wants now\nFind the key." in checkpoint["contextBlock"]
    assert "- npcs — Who Mara met" in checkpoint["contextBlock"]
    assert api.get(f"{DM}/memories").json()["memoryEnabled"] is True


def test_the_memories_page_says_memory_is_off_and_what_that_means(api, send, designer):
    api.put(DM, {**PROMPT, "memory": {}}, format="json")
    send(script(call("close_memory", **QUEST)))
    api.put(DM, PROMPT, format="json")

    html = designer.get("/studio/ashmere/agents/dm/memories/").content.decode()

    assert "Memory is off for dm." in html
    assert "sees none of them" in html and 'data-memory="quest"' in html
