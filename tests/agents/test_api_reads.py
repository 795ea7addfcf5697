"""What the agent has and sees: history, context, checkpoint and memories."""

import pytest

from agents.compaction import checkpoint_write as write_checkpoint
from agents.models import Block
from memories.models import Memory
from studio.tokens import count_tokens
from tests.conftest import call, error_of, script

DM = "/api/v1/agents/dm"
QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the silver key."}
NPCS = {"name": "npcs", "description": "Everyone met so far", "content": "The ferryman: wary."}


FIRST_MESSAGE = script(
    call("close_memory", **QUEST),
    call("open_memory", name="quest"),
    call("close_memory", **NPCS),
    {"say": "Noted."},
)


@pytest.fixture
def played(agent, send):
    """Three blocks: memories written and one opened, then two plain messages."""
    return [send(FIRST_MESSAGE), send("I walk to the chapel."), send("I knock.")]


def checkpoint_write(
    agent, *, through_block: int, summary: str | None = "Mara crossed the flats.", kind="compaction"
):
    return write_checkpoint(agent=agent, kind=kind, through_block=through_block, summary=summary)


# --- history ---------------------------------------------------------------------------


def test_history_lists_the_blocks_in_order_with_every_entry(api, played):
    response = api.get(f"{DM}/history")

    assert response.status_code == 200
    blocks = response.json()["blocks"]
    assert [b["block"] for b in blocks] == [1, 2, 3]
    assert [b["turnId"] for b in blocks] == [t["id"] for t in played]
    assert all(b["status"] == "completed" and b["folded"] is False for b in blocks)
    first = blocks[0]["entries"]
    assert first[0] == {"type": "message", "role": "user", "content": FIRST_MESSAGE}
    assert first[1] == {
        "type": "tool_call",
        "name": "close_memory",
        "arguments": QUEST,
        "result": "Created memory 'quest' and saved it closed. open_memory reads it when you need it.",
        "isError": False,
    }
    assert [e["name"] for e in first[1:4]] == ["close_memory", "open_memory", "close_memory"]
    assert first[4] == {"type": "message", "role": "assistant", "content": "Noted."}
    assert blocks[1]["entries"] == [
        {"type": "message", "role": "user", "content": "I walk to the chapel."},
        {"type": "message", "role": "assistant", "content": 'You said: "I walk to the chapel."'},
    ]
    assert response.json()["nextAfter"] is None


def test_history_of_a_new_agent_is_empty(api, agent):
    response = api.get(f"{DM}/history")

    assert response.json() == {"blocks": [], "nextCursor": None, "nextAfter": None}


def test_history_pages_with_limit_and_after(api, played):
    first = api.get(f"{DM}/history?limit=2").json()
    second = api.get(f"{DM}/history?after={first['nextAfter']}&limit=2").json()

    assert [b["block"] for b in first["blocks"]] == [1, 2]
    assert first["nextAfter"] == 2
    assert [b["block"] for b in second["blocks"]] == [3]
    assert second["nextAfter"] is None


def test_history_with_a_limit_of_exactly_what_is_left_has_no_next_page(api, played):
    response = api.get(f"{DM}/history?after=1&limit=2")

    assert [b["block"] for b in response.json()["blocks"]] == [2, 3]
    assert response.json()["nextAfter"] is None


def test_history_keeps_folded_blocks_marked(api, agent, played):
    Block.objects.filter(agent=agent, number=1).update(folded=True)

    blocks = api.get(f"{DM}/history").json()["blocks"]

    assert [b["folded"] for b in blocks] == [True, False, False]


@pytest.mark.parametrize(
    "query", ["limit=abc", "limit=0", "limit=1001", "limit=-1", "after=-1", "after=two", "limit=1.5"]
)
def test_history_with_a_bad_limit_or_after_is_400(api, agent, query):
    response = api.get(f"{DM}/history?{query}")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"
    assert query.split("=")[0] in error_of(response)["message"]


# --- context ------------------------------------------------------------------------------


def test_context_is_what_the_next_model_call_is_given(api, agent, played):
    response = api.get(f"{DM}/context")

    assert response.status_code == 200
    body = response.json()
    assert body["system"] == "You are the dungeon master."
    assert body["contextBlock"] is None
    assert body["tools"] == ["open_memory", "close_memory", "delete_memory"]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user"] + ["assistant", "tool"] * 3 + [
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert body["messages"][1]["toolCalls"][0]["name"] == "close_memory"
    assert body["messages"][2]["content"].startswith("Created memory 'quest'")
    assert body["messages"][-1] == {"role": "assistant", "content": 'You said: "I knock."'}


def test_context_tokens_add_up_from_the_stored_counts(api, agent, played):
    tokens = api.get(f"{DM}/context").json()["tokens"]

    stored = sum(Block.objects.filter(agent=agent).values_list("tokens", flat=True))
    assert tokens["system"] == count_tokens("You are the dungeon master.")
    assert tokens["contextBlock"] == 0
    assert tokens["messages"] == stored > 0
    assert tokens["tools"] > 0  # memory is on: the three tools' definitions
    assert tokens["total"] == tokens["system"] + tokens["tools"] + tokens["contextBlock"] + tokens["messages"]
    assert tokens["maxTokens"] == 32000
    assert (tokens["estimate"], tokens["tokenizer"]) == (False, "cl100k_base")  # the scripted model's own


def test_context_of_a_new_agent_is_just_the_system_prompt(api, agent):
    body = api.get(f"{DM}/context").json()

    assert body["messages"] == []
    assert body["contextBlock"] is None
    assert body["tokens"]["total"] == body["tokens"]["system"] + body["tokens"]["tools"]
    assert body["tokens"]["system"] > 0


def test_context_after_a_checkpoint_starts_with_its_block_and_only_later_messages(api, agent, played):
    checkpoint = checkpoint_write(agent, through_block=2)

    body = api.get(f"{DM}/context").json()

    assert body["contextBlock"] == checkpoint.context_block
    assert body["messages"] == [
        {"role": "user", "content": "I knock."},
        {"role": "assistant", "content": 'You said: "I knock."'},
    ]
    assert body["tokens"]["contextBlock"] == checkpoint.block_tokens > 0
    assert body["tokens"]["messages"] == Block.objects.get(agent=agent, number=3).tokens
    parts = ("system", "tools", "contextBlock", "messages")
    assert body["tokens"]["total"] == sum(body["tokens"][k] for k in parts)


def test_context_with_memory_off_offers_no_tools(api, define):
    define("dm", memory_enabled=False)

    response = api.get(f"{DM}/context")

    assert response.json()["tools"] == []
    assert response.json()["tokens"]["tools"] == 0


# --- checkpoint -------------------------------------------------------------------------


def test_checkpoint_before_the_first_compaction_is_404_no_checkpoint(api, agent, played):
    response = api.get(f"{DM}/checkpoint")

    assert response.status_code == 404
    assert error_of(response)["code"] == "no_checkpoint"


def test_checkpoint_shows_what_the_compaction_recorded(api, agent, played):
    checkpoint = checkpoint_write(agent, through_block=2)

    response = api.get(f"{DM}/checkpoint")

    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "compaction"
    assert body["throughBlock"] == 2
    assert body["summary"] == "Mara crossed the flats."
    assert body["openMemories"] == [QUEST]
    assert body["closedMemories"] == [{"name": "npcs", "description": "Everyone met so far"}]
    assert body["createdAt"] == checkpoint.created_at.isoformat()
    assert "## Open memories — current as of this point" in body["contextBlock"]


def test_the_newest_checkpoint_is_the_one_in_force(api, agent, played):
    checkpoint_write(agent, through_block=1)
    checkpoint_write(agent, through_block=3, summary=None, kind="forced")

    body = api.get(f"{DM}/checkpoint").json()

    assert (body["kind"], body["throughBlock"], body["summary"]) == ("forced", 3, None)


# --- memories ---------------------------------------------------------------------------


def test_memories_lists_the_store_with_its_budgets(api, agent, played):
    response = api.get(f"{DM}/memories")

    assert response.status_code == 200
    body = response.json()
    quest = Memory.objects.get(agent=agent, name="quest")
    npcs = Memory.objects.get(agent=agent, name="npcs")
    assert [m["name"] for m in body["memories"]] == ["quest", "npcs"]
    first = body["memories"][0]
    assert {k: first[k] for k in ("name", "description", "content")} == QUEST
    assert first["open"] is True
    assert first["tokens"] == quest.tokens == count_tokens(QUEST["content"])
    assert first["bytes"] == quest.bytes
    assert first["updatedAt"] == quest.updated_at.isoformat()
    assert first["updatedBy"] == "agent"
    assert body["memories"][1]["open"] is False
    assert body["openTokens"] == quest.tokens
    assert body["maxOpenTokens"] == 4000
    assert body["storeBytes"] == quest.bytes + npcs.bytes
    assert body["storeCapBytes"] == 1_048_576


def test_memories_of_a_new_agent_is_an_empty_store(api, agent):
    body = api.get(f"{DM}/memories").json()

    assert body["memories"] == []
    assert (body["openTokens"], body["storeBytes"]) == (0, 0)


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_memories_cannot_be_written_through_the_api(admin_api, agent, played, method):
    response = getattr(admin_api, method)(
        f"{DM}/memories", {"name": "quest", "description": "x", "content": "overwritten"}, format="json"
    )

    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"
    assert Memory.objects.get(agent=agent, name="quest").content == QUEST["content"]
    assert Memory.objects.filter(agent=agent).count() == 2


# --- keys and games -------------------------------------------------------------------


READS = ["history", "context", "checkpoint", "memories", "turns"]


@pytest.mark.parametrize("read", READS)
def test_every_read_needs_a_key(anonymous, agent, read):
    response = anonymous.get(f"{DM}/{read}")

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"


@pytest.mark.parametrize("read", READS)
def test_every_read_of_another_games_agent_is_404(outsider, agent, played, read):
    checkpoint_write(agent, through_block=1)

    response = outsider.get(f"{DM}/{read}")

    assert response.status_code == 404
    assert error_of(response)["code"] == "agent_not_found"


def test_another_game_with_an_agent_of_the_same_name_reads_only_its_own(outsider, agent, played):
    outsider.put(DM, {"systemPrompt": "Theirs", "memory": {}}, format="json")

    history = outsider.get(f"{DM}/history").json()
    memories = outsider.get(f"{DM}/memories").json()
    context = outsider.get(f"{DM}/context").json()

    assert history["blocks"] == []
    assert memories["memories"] == []
    assert (context["system"], context["messages"]) == ("Theirs", [])
