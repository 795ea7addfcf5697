"""Agent files: an export is one JSON document; an import (admin keys) makes
an agent of it in the key's game; a round trip keeps what a designer sees.
Of the nine-block story, played once for the module (conftest.py)."""

import copy
import json

import pytest

from agents.models import Agent
from agents.sending.context import entries_tokens
from tests.support.agent_file import exported as read_export
from tests.support.time_story import DM

from ...conftest import error_of

# Not transactional: the story is played once for the module (conftest.py).
pytestmark = pytest.mark.django_db

IMPORT = "/api/v1/agents/import"
COPY = "/api/v1/agents/dm-copy"


@pytest.fixture
def exported(api, story):
    return read_export(api.get(f"{DM}/export"))


def seen(api, base: str) -> dict:
    """Everything a designer can read of an agent through the API, with
    turn ids replaced by their blocks (an import gives turns new ids)."""
    blocks = api.get(f"{base}/history?limit=500").json()["blocks"]
    block_of = {b["turnId"]: b["block"] for b in blocks}
    # An import's newest revision is its own (tests/agents/test_api_revisions.py).
    made = ("name", "createdAt", "updatedAt", "revision")
    agent = {k: v for k, v in api.get(base).json().items() if k not in made}
    out = {
        "agent": agent,
        "history": [{**b, "turnId": block_of[b["turnId"]]} for b in blocks],
        "turns": [
            {k: v for k, v in t.items() if k not in ("id", "cost")}
            for t in api.get(f"{base}/turns?limit=200").json()["turns"]
        ],
    }
    for path in ("memories", "context", "checkpoint", "checkpoints"):
        out[path] = api.get(f"{base}/{path}").json()
    for checkpoint in out["checkpoints"]["checkpoints"]:
        out[f"checkpoint {checkpoint['id']}"] = api.get(f"{base}/checkpoints/{checkpoint['id']}").json()
    for number in range(1, agent["stats"]["blocks"] + 1):
        out[f"memories at {number}"] = api.get(f"{base}/memories?atBlock={number}").json()
        out[f"context at {number}"] = api.get(f"{base}/context?atBlock={number}").json()
    for name in ("quest", "npcs", "bells"):
        events = api.get(f"{base}/memories/{name}/history").json()["events"]
        out[f"history of {name}"] = [{**e, "turnId": block_of.get(e["turnId"])} for e in events]
    return out


def test_an_export_is_one_document_with_the_config_memories_checkpoints_blocks_and_history(exported):
    assert (exported["format"], exported["version"], exported["name"]) == ("studio.agent", 1, "dm")
    assert exported["config"]["systemPrompt"] == "You are the dungeon master."
    assert [m["name"] for m in exported["memories"]] == ["npcs", "bells"]
    assert [c["id"] for c in exported["checkpoints"]] == [1, 2]
    assert [b["block"] for b in exported["blocks"]] == list(range(1, 10))
    assert exported["blocks"][0]["turn"]["status"] == "completed"
    assert {e["name"] for e in exported["memoryHistory"]} == {"quest", "npcs", "bells"}
    assert [r["revision"] for r in exported["configHistory"]] == [1]


def test_an_import_of_an_export_keeps_everything_a_designer_sees(api, admin_api, exported):
    response = admin_api.post(IMPORT, {**exported, "name": "dm-copy"}, format="json")

    assert response.status_code == 201, response.content
    assert response["Location"] == COPY
    assert response.json()["name"] == "dm-copy"
    copied, original = seen(api, COPY), seen(api, DM)
    assert without_block_counts(without_import_marks(copied)) == without_block_counts(
        as_imported(original, last_block=len(exported["blocks"]))
    )
    for mine, theirs, filed in zip(copied["history"], original["history"], exported["blocks"], strict=True):
        assert mine["tokens"] == entries_tokens(filed["entries"])
        assert abs(mine["tokens"] - theirs["tokens"]) <= tool_calls(theirs)


def as_imported(view: dict, *, last_block: int) -> dict:
    """What `seen` read of an agent, as an import of its file shows it: each
    memory of the store written last by the import (at the end of the last
    block) — before that, by the file — every change written by the file,
    which names who made it, and an `imported` change after each stored
    memory's own."""
    out = copy.deepcopy(view)
    stored = {memory["name"]: dict(memory) for memory in out["memories"]["memories"]}
    for key in [k for k in out if k.startswith("memories at ")]:
        out[key] = written_by_the_file(out[key])
    for memories in (out["memories"], out[f"memories at {last_block}"]):
        for memory in memories["memories"]:
            memory["updatedBy"] = "import"
            memory.pop("updatedAt")
    for key in [k for k in out if k.startswith("history of ")]:
        name = key.removeprefix("history of ")
        out[key] = [{**event, "by": "file", "fileBy": event["by"]} for event in out[key]]
        if name in stored:
            memory = stored[name]
            after = {k: memory[k] for k in ("description", "content", "open")}
            out[key].append(
                {
                    "name": name,
                    "change": "imported",
                    "by": "import",
                    "turnId": None,
                    "block": last_block,
                    "checkpoint": None,
                    "before": None,
                    "after": after,
                    "fileBy": None,
                }
            )
    return out


def written_by_the_file(memories: dict) -> dict:
    """A store as an import of its agent's file shows it as of a block
    before the file's last: every memory last written by the file."""
    return {**memories, "memories": [{**m, "updatedBy": "file"} for m in memories["memories"]]}


def without_import_marks(view: dict) -> dict:
    """`view` without what an import sets anew: when each memory was
    written (the import's moment), and the note and moment of each
    `imported` change (checked in tests/agents/test_agent_files.py)."""
    out = copy.deepcopy(view)
    for key in [k for k in out if k == "memories" or k.startswith("memories at ")]:
        for memory in out[key]["memories"]:
            if memory["updatedBy"] == "import":
                memory.pop("updatedAt")
    for key in [k for k in out if k.startswith("history of ")]:
        for event in out[key]:
            if event["change"] == "imported":
                event.pop("note"), event.pop("at")
                event["after"].pop("version")
    return out


def without_block_counts(view: dict) -> dict:
    """What `seen` read, but the tokens of blocks and of the messages they
    make. An import counts each block itself: the studio counted the
    original's entries as they were sent, the import counts them as the
    file has them, where a tool call's arguments stand in the order the
    database read them back in — which may count a token apart."""
    out = {**view, "history": [{k: v for k, v in b.items() if k != "tokens"} for b in view["history"]]}
    for key, value in view.items():
        if key.startswith("context at "):
            tokens = {k: v for k, v in value["tokens"].items() if k not in ("messages", "total")}
            out[key] = {**value, "tokens": tokens}
    return out


def tool_calls(block: dict) -> int:
    return sum(entry["type"] == "tool_call" for entry in block["entries"])


def test_a_round_trip_gives_back_the_same_file(api, admin_api, exported):
    admin_api.post(IMPORT, {**exported, "name": "dm-copy"}, format="json")

    again = read_export(api.get(f"{COPY}/export"))

    def comparable(document):
        turns = {b["turn"]["id"]: b["block"] for b in document["blocks"]}
        # Counted again on import (see without_block_counts).
        blocks = [{**b, "turn": {**b["turn"], "id": None}, "tokens": None} for b in document["blocks"]]
        history = [{**e, "turnId": turns.get(e["turnId"])} for e in document["memoryHistory"]]
        rest = {k: v for k, v in document.items() if k not in ("name", "exportedAt")}
        return {**rest, "blocks": blocks, "memoryHistory": history}

    # The import's own marks: each change the file's, naming who the file
    # said made it, then one imported change a memory; each memory written
    # by the import, just now.
    imported = [e for e in again["memoryHistory"] if e["change"] == "imported"]
    assert sorted(e["name"] for e in imported) == sorted(m["name"] for m in exported["memories"])
    told = [e for e in again["memoryHistory"] if e["change"] != "imported"]
    assert [(e["by"], e["fileBy"]) for e in told] == [("file", e["by"]) for e in exported["memoryHistory"]]
    assert {m["updatedBy"] for m in again["memories"]} == {"import"}
    again["memoryHistory"] = [{**e, "by": e["fileBy"], "fileBy": None} for e in told]
    # And one revision more: the config it was made with, recorded as the import's.
    made = again["configHistory"].pop()
    assert made["revision"] == exported["configHistory"][-1]["revision"] + 1
    assert made["config"] == exported["config"]
    kept = {m["name"]: m for m in exported["memories"]}
    again["memories"] = [
        {**m, "updatedBy": kept[m["name"]]["updatedBy"], "updatedAt": kept[m["name"]]["updatedAt"]}
        for m in again["memories"]
    ]
    assert comparable(again) == comparable(exported)
    assert [b["tokens"] for b in again["blocks"]] == [
        entries_tokens(b["entries"]) for b in exported["blocks"]
    ]


def test_an_import_goes_into_the_keys_game_under_the_files_name(outsider, outsider_key, exported, game):
    response = outsider.post(IMPORT, exported, format="json")

    assert response.status_code == 201
    imported = Agent.objects.get(name="dm", game__slug="elsewhere")
    assert imported.last_block == 9
    assert outsider.get(f"{DM}/memories").json()["memories"][0]["name"] == "npcs"


def test_a_fork_or_a_send_to_an_imported_agent_plays_on(api, admin_api, exported):
    admin_api.post(IMPORT, {**exported, "name": "dm-copy"}, format="json")

    turn = api.post(f"{COPY}/messages", {"content": "I listen."}, format="json").json()["turn"]
    forked = api.post(f"{COPY}/fork", {"name": "dm-fork", "atBlock": 5}, format="json")

    assert (turn["status"], turn["block"]) == ("completed", 10)
    assert forked.status_code == 201
    then = written_by_the_file(api.get(f"{DM}/memories?atBlock=5").json())
    assert api.get("/api/v1/agents/dm-fork/memories").json() == then


def test_an_agent_from_before_the_record_exports_and_imports_as_such(api, admin_api, story):
    Agent.objects.filter(name="dm").update(recorded_from_block=4)
    document = read_export(api.get(f"{DM}/export"))

    admin_api.post(IMPORT, {**document, "name": "dm-copy"}, format="json")

    assert error_of(api.get(f"{COPY}/memories?atBlock=3"))["code"] == "history_not_recorded"
    then = written_by_the_file(api.get(f"{DM}/memories?atBlock=4").json())
    assert api.get(f"{COPY}/memories?atBlock=4").json() == then


def test_only_admin_keys_import(api, anonymous, exported):
    refused = api.post(IMPORT, {**exported, "name": "dm-copy"}, format="json")

    assert refused.status_code == 403
    assert error_of(refused)["code"] == "forbidden"
    assert anonymous.post(IMPORT, exported, format="json").status_code == 401
    assert api.get(COPY).status_code == 404


def test_an_import_under_a_name_in_use_is_409(admin_api, exported):
    response = admin_api.post(IMPORT, exported, format="json")

    assert response.status_code == 409
    assert error_of(response)["code"] == "name_taken"
    assert "dm" in error_of(response)["message"]


def test_an_import_under_a_bad_name_is_400(admin_api, exported):
    response = admin_api.post(IMPORT, {**exported, "name": "no spaces"}, format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_name"


def _set(document, path, value):
    *parents, last = path
    target = document
    for key in parents:
        target = target[key]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value


DELETE = object()
BAD_FILES = [
    (("format",), "agent", "format", "not a studio agent file"),
    (("version",), 2, "version", "version 1"),
    (("config",), DELETE, "config", "required"),
    (("blocks", 1, "block"), 7, "blocks", "numbered 1, 2, 3"),
    (("blocks", 0, "entries", 0, "content"), DELETE, "blocks[0].entries[0]", "needs content"),
    (("blocks", 2, "status"), "running", "blocks[2].status", "not a valid choice"),
    (("blocks", 8, "folded"), True, "blocks[8].folded", "through 7"),
    (("checkpoints", 0, "throughBlock"), 40, "checkpoints[0].throughBlock", "9 blocks"),
    (("memories", 0, "content"), "bad\x00text", "memories[0].content", "Null characters"),
    (
        ("blocks", 0, "entries", 1, "arguments", "content"),
        "\ud800",
        "blocks[0].entries[1].arguments.content",
        "surrogate",
    ),
    (
        ("memoryHistory", 0, "before"),
        {"content": "\x00"},
        "memoryHistory[0].before.content",
        "Null characters",
    ),
    (("memories", 1, "name"), "npcs", "memories", "same name"),
    (
        ("memoryHistory", 0, "turnId"),
        "5b0e4c1f-9a7d-4e2b-8c6f-3d1a2b4c6e80",
        "memoryHistory[0].turnId",
        "no block has turn",
    ),
    (("memoryHistory", 0, "after"), {"content": "x"}, "memoryHistory[0].after", "description"),
    (("blocks", 0, "context", "revision"), 9, "blocks[0].context.revision", "no revision 9"),
    (("config", "model"), "openai:no-such-model", "config", "no price"),
    (("memry",), [], "memry", "not a field"),
]


@pytest.mark.parametrize("path, value, where, why", BAD_FILES)
def test_a_bad_file_is_400_naming_what_is_wrong(admin_api, exported, path, value, where, why):
    document = copy.deepcopy(exported)
    _set(document, path, value)
    document["name"] = "dm-copy"

    # As JSON text with escapes: a lone surrogate has no UTF-8 of its own.
    response = admin_api.post(IMPORT, json.dumps(document), content_type="application/json")

    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "invalid_agent_file"
    assert where in error["message"] and why in error["message"], error["message"]
    assert admin_api.get(COPY).status_code == 404


def refused_import(admin_api, document) -> str:
    """The message of an import of `document` refused as a bad file."""
    response = admin_api.post(IMPORT, {**document, "name": "dm-copy"}, format="json")
    assert response.status_code == 400, response.content
    assert error_of(response)["code"] == "invalid_agent_file"
    assert admin_api.get(COPY).status_code == 404
    return error_of(response)["message"]


def test_a_file_whose_memories_pass_the_store_cap_is_400(admin_api, exported, studio_conf):
    studio_conf(STORE_CAP_BYTES=60)  # npcs takes 42 bytes, bells 39

    message = refused_import(admin_api, exported)

    assert message.startswith("memories[1]: the store would grow to 81 bytes, over the cap of 60"), message


def test_a_file_whose_open_memories_reach_half_of_max_tokens_is_400(admin_api, exported):
    document = copy.deepcopy(exported)
    document["config"]["compaction"] = {"type": "summarize", "maxTokens": 1000}
    document["config"]["memory"] = {"maxOpenTokens": 400}
    document["memories"][0]["content"] = "word" + " word" * 299  # npcs, open: 300 tokens
    document["memories"][1].update(open=True, content="word" + " word" * 199)  # bells, open: 200

    message = refused_import(admin_api, document)

    assert message.startswith("memories[1]: open memories would take 500 tokens, half of maxTokens"), message


def test_a_file_with_a_closed_memory_too_large_to_open_again_is_400(admin_api, exported):
    document = copy.deepcopy(exported)
    document["memories"][1]["content"] = "word" + " word" * 4000  # bells, closed: 4,001 tokens

    message = refused_import(admin_api, document)

    assert message.startswith(
        "memories[1]: 'bells' would be 4001 tokens, more than the whole open budget of 4000"
    )


def test_a_file_with_an_open_memory_too_large_to_open_again_once_closed_is_400(admin_api, exported):
    document = copy.deepcopy(exported)
    document["memories"][0]["content"] = "word" + " word" * 4000  # npcs, open: 4,001 tokens

    message = refused_import(admin_api, document)

    assert message.startswith(
        "memories[0]: 'npcs' would be 4001 tokens, more than the whole open budget of 4000"
    )


# --- what an import counts itself -----------------------------------------------------------------


def test_an_import_counts_every_blocks_tokens_itself_whatever_the_file_says(api, admin_api, exported):
    forged = copy.deepcopy(exported)
    for block in forged["blocks"]:
        block["tokens"] = 0

    response = admin_api.post(IMPORT, {**forged, "name": "dm-copy"}, format="json")

    assert response.status_code == 201, response.content
    copied = api.get(f"{COPY}/history?limit=500").json()["blocks"]
    assert [b["tokens"] for b in copied] == [entries_tokens(b["entries"]) for b in exported["blocks"]]
    assert all(b["tokens"] > 0 for b in copied)
    assert api.get(COPY).json()["stats"]["verbatimTokens"] == api.get(DM).json()["stats"]["verbatimTokens"]
    assert api.get(f"{COPY}/context").json()["tokens"] == api.get(f"{DM}/context").json()["tokens"]


def test_an_import_counts_checkpoints_and_memories_itself(api, admin_api, exported):
    forged = copy.deepcopy(exported)
    for checkpoint in forged["checkpoints"]:
        checkpoint["tokens"] = 0
    for memory in forged["memories"]:
        memory["tokens"], memory["bytes"] = 0, 0

    admin_api.post(IMPORT, {**forged, "name": "dm-copy"}, format="json")

    assert api.get(f"{COPY}/checkpoints").json() == api.get(f"{DM}/checkpoints").json()
    copied, original = api.get(f"{COPY}/memories").json(), api.get(f"{DM}/memories").json()

    def counts(store):
        return [(m["name"], m["tokens"], m["bytes"]) for m in store["memories"]], store["openTokens"]

    assert counts(copied) == counts(original) and copied["openTokens"] > 0


# --- how long what a file carries may be ---------------------------------------------------------

LONG = [
    (("checkpoints", 0, "summary"), "x\n" * 100_001, "checkpoints[0].summary", "200,000 characters"),
    (("blocks", 0, "entries", 0, "content"), "a" * 100_001, "blocks[0].entries[0]", "100,000 characters"),
    (("blocks", 3, "entries", 1, "content"), "a" * 200_001, "blocks[3].entries[1]", "200,000 characters"),
    (
        ("blocks", 0, "entries", 1, "arguments", "content"),
        "a" * 200_001,
        "blocks[0].entries[1].arguments",
        "200,000 characters",
    ),
    (("blocks", 0, "entries", 1, "result"), "r" * 3001, "blocks[0].entries[1].result", "3,000 characters"),
    (("blocks", 0, "turn", "reply"), "a" * 200_001, "blocks[0].turn.reply", "200,000 characters"),
    (("blocks", 0, "turn", "error"), "a" * 200_001, "blocks[0].turn.error", "200,000 characters"),
    (("memories", 0, "content"), "é" * 501, "memories[0].content", "1,000 bytes"),
    (
        ("checkpoints", 0, "openMemories", 0, "content"),
        "é" * 501,
        "checkpoints[0].openMemories[0]",
        "1,000 bytes",
    ),
    (("memoryHistory", 0, "after", "content"), "é" * 501, "memoryHistory[0].after.content", "1,000 bytes"),
    (("memoryHistory", 1, "before", "content"), "é" * 501, "memoryHistory[1].before.content", "1,000 bytes"),
    (("memoryHistory", 0, "note"), "n" * 1001, "memoryHistory[0].note", "1,000 characters"),
]


@pytest.mark.parametrize("path, value, where, why", LONG)
def test_text_past_its_limit_in_a_file_is_400(admin_api, exported, studio_conf, path, value, where, why):
    studio_conf(STORE_CAP_BYTES=1000)
    document = copy.deepcopy(exported)
    _set(document, path, value)

    message = refused_import(admin_api, document)

    assert where in message and why in message, message


def test_a_context_block_longer_than_its_summary_and_memories_rendered_is_400(admin_api, exported):
    document = copy.deepcopy(exported)
    document["checkpoints"][1]["contextBlock"] += "\nAnd the player owes the ferryman nothing."

    message = refused_import(admin_api, document)

    assert message.startswith("checkpoints[1].contextBlock: "), message
    assert "longer than its summary and memories rendered" in message


def test_text_at_its_limit_imports(api, admin_api, exported):
    document = copy.deepcopy(exported)
    document["blocks"][0]["entries"][0]["content"] = "a" * 100_000
    document["blocks"][3]["entries"][1]["content"] = "a" * 200_000
    document["memoryHistory"][0]["note"] = "n" * 1000

    response = admin_api.post(IMPORT, {**document, "name": "dm-copy"}, format="json")

    assert response.status_code == 201, response.content
