"""What the browser tests share: a store worth looking at, and pages
waited on until their live stream is open."""

from playwright.sync_api import expect

from agents.models import Agent, Block, TurnStatus
from memories import store
from memories.models import Memory
from tests.conftest import call, script

from .sending import turn_send

QUEST = {
    "name": "quest",
    "description": "What the player is trying to do right now, and why",
    "content": "Retrieve the silver key from the drowned chapel. Mara believes it opens her sister's house in Ashmere.",
}
NPCS = {
    "name": "npcs",
    "description": "Everyone Mara has met and what they think of her",
    "content": "The ferryman: wary of Mara, owes her a crossing.\nSister Ysolde: missing since the flood.",
}


def play(agent, *steps):
    turn = turn_send(agent=agent, content=script(*steps))
    assert turn.status == "completed", turn.error
    return turn


def populate(agent):
    """A store with a history worth reading: opened, rewritten by the agent
    and by the compactor, a dropped rewrite, and a deleted memory."""
    play(agent, call("close_memory", **QUEST), call("close_memory", **NPCS))
    play(
        agent,
        call(
            "close_memory",
            name="inventory",
            description="What Mara is carrying",
            content="A lantern, a rope.",
        ),
        call("open_memory", name="inventory"),
        call("delete_memory", name="inventory"),
    )
    play(agent, call("open_memory", name="npcs"))
    play(
        agent,
        call(
            "close_memory",
            name="npcs",
            description="Everyone Mara has met, and how each meeting went",
            content="The ferryman: wary of Mara, owes her a crossing.\nSister Ysolde: seen at the chapel at dusk.",
        ),
    )
    play(agent, call("open_memory", name="quest"))
    quest = Memory.objects.get(agent=agent, name="quest")
    version = quest.version
    store.memory_rewrite_by_compactor(
        agent=agent,
        name="quest",
        memory_id=quest.pk,
        version_read=version,
        content="Retrieve the silver key from the drowned chapel. Mara now knows it opens the cellar of her sister's house in Ashmere.",
    )
    store.memory_rewrite_by_compactor(
        agent=agent, name="quest", memory_id=quest.pk, version_read=version, content="Stale summary."
    )


def blocks_made(agent, count: int, *, failed=(), words: int = 1) -> None:
    """`count` ended blocks on `agent` at once (no model is called): each a
    player's message of `words` words and a reply; the numbers in `failed`
    failed."""
    said = " ".join(["Hello."] * words)
    entries = [
        {"type": "message", "role": "user", "content": said},
        {"type": "message", "role": "assistant", "content": said},
    ]
    Block.objects.bulk_create(
        Block(
            agent=agent,
            number=number,
            status=TurnStatus.FAILED if number in failed else TurnStatus.COMPLETED,
            entries=entries if number not in failed else entries[:1],
            tokens=2 * words,
        )
        for number in range(1, count + 1)
    )
    Agent.objects.filter(pk=agent.pk).update(last_block=count)


def wait_until_live(page) -> None:
    """Until the page's live stream is open (its status's data-state)."""
    expect(page.locator("[data-live-status]")).to_have_attribute("data-state", "open")


def open_live(page, url="/studio/ashmere/agents/dm/"):
    """Go to `url` and wait until its live stream says "live"."""
    page.goto(url)
    expect(page.locator("[data-live-status]")).to_have_text("live")


def block(page, number):
    """The agent page's history block `number`."""
    return page.locator(f"article.block[data-block='{number}']")
