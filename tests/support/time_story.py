"""A story of nine blocks to look at through time: memories written,
rewritten by the compactor, deleted; a compaction asked for after block 4
and a forced checkpoint after block 8. `STORE_AFTER` is what the tools
did: the store as each block left it, by memory name (open?, content)."""

import html
import re

from django.db import transaction

from agents.providers.scripted import ScriptedProvider
from memories.tools import tool_run
from tests.conftest import call, script
from tests.support.sending import turn_send

DM = "/api/v1/agents/dm"
PAGE = "/studio/ashmere/agents/dm/"
QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the key."}
NPCS = {"name": "npcs", "description": "Everyone met so far", "content": "The ferryman: wary."}
BELLS = {"name": "bells", "description": "The chapel bells", "content": "They ring at dusk."}

MESSAGES = [
    script(call("close_memory", **QUEST), call("open_memory", name="quest"), {"say": "Noted."}),
    script(call("close_memory", **NPCS), call("close_memory", name="quest", content="Find the silver key.")),
    script(call("open_memory", name="quest"), {"say": "@memory quest: Cross the river."}),
    "I knock on the chapel door.",
    # A compaction after block 4 folds 1-3; its summary reads the line above
    # and rewrites quest, which is open.
    script(call("open_memory", name="npcs")),
    script(call("delete_memory", name="quest"), call("close_memory", **BELLS)),
    "I wait for dusk.",
    "Night falls.",
    # A forced checkpoint after block 8 folds 4-7 (the window is 4 blocks).
    "The bells ring.",
]

STORE_AFTER = {
    1: {"quest": (True, "Find the key.")},
    2: {"quest": (False, "Find the silver key."), "npcs": (False, "The ferryman: wary.")},
    3: {"quest": (True, "Find the silver key."), "npcs": (False, "The ferryman: wary.")},
    4: {"quest": (True, "Find the silver key."), "npcs": (False, "The ferryman: wary.")},
    5: {"quest": (True, "Cross the river."), "npcs": (True, "The ferryman: wary.")},
    6: {"npcs": (True, "The ferryman: wary."), "bells": (False, "They ring at dusk.")},
    7: {"npcs": (True, "The ferryman: wary."), "bells": (False, "They ring at dusk.")},
    8: {"npcs": (True, "The ferryman: wary."), "bells": (False, "They ring at dusk.")},
    9: {"npcs": (True, "The ferryman: wary."), "bells": (False, "They ring at dusk.")},
}


# A forced checkpoint after block 8 folds 4-7: the window is 4 blocks.
FORCED_CHECKPOINT_BLOCKS = 4


def play(api, studio_conf) -> list[dict]:
    """Play the story through the API; returns the turns."""
    studio_conf(FORCED_CHECKPOINT_BLOCKS=FORCED_CHECKPOINT_BLOCKS)
    return play_messages(api)


def play_messages(api) -> list[dict]:
    """The story's sends (and compaction), with FORCED_CHECKPOINT_BLOCKS set."""
    turns = []
    for number, message in enumerate(MESSAGES, 1):
        response = api.post(f"{DM}/messages", {"content": message}, format="json")
        assert response.status_code == 200, response.content
        turns.append(response.json()["turn"])
        if number == 4:
            assert api.post(f"{DM}/compact").status_code == 202
    return turns


def store_of(body: dict) -> dict:
    return {m["name"]: (m["open"], m["content"]) for m in body["memories"]}


def compact_dropping_a_rewrite(api, agent, monkeypatch) -> None:
    """Three blocks, then a compaction whose rewrite of the open memory
    `quest` ("Later.") is dropped: the agent wrote `quest` ("Mine.") while
    the compactor was summarizing."""
    turn_send(
        agent=agent,
        content=script(call("close_memory", name="quest", description="d", content="Find the key.")),
    )
    turn_send(
        agent=agent, content=script(call("open_memory", name="quest"), {"say": "@memory quest: Later."})
    )
    turn_send(agent=agent, content="newest")
    original = ScriptedProvider.summarize

    def agent_writes_meanwhile(self, request):
        with transaction.atomic():
            tool_run(agent=agent, name="close_memory", arguments={"name": "quest", "content": "Mine."})
            tool_run(agent=agent, name="open_memory", arguments={"name": "quest"})
        return original(self, request)

    monkeypatch.setattr(ScriptedProvider, "summarize", agent_writes_meanwhile)
    assert api.post(f"{DM}/compact").status_code == 202


def at(number) -> str:
    return f"{PAGE}blocks/{number}/"


def text(response) -> str:
    """The page's text, tags and entities gone, spaces collapsed."""
    body = re.sub(r"<[^>]+>", " ", response.content.decode())
    return re.sub(r"\s+", " ", html.unescape(body))
