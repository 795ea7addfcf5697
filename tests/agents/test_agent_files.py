"""Agent files: an export is one JSON document; an import (admin keys) makes
an agent of it in the key's game; a round trip keeps what a designer sees.

Here, the tests that need a commit or an agent of their own; those that
only look at the nine-block story are in story/test_files.py, which plays it
once."""

import json
import tracemalloc

import pytest
from asgiref.sync import async_to_sync
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.renderers import JSONRenderer

from agents.history.export import agent_document
from agents.models import Agent, Block, Turn, TurnStatus
from agents.sending.context import user_entry
from agents.sending.turn_slot import turn_cancel
from memories.models import MemoryEvent
from tests.support.agent_file import exported as read_export
from tests.support.exports import streamed
from tests.support.sending import turn_send
from tests.support.time_story import DM, play

from ..conftest import UNTIL_CANCELLED, call, error_of, in_thread, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

IMPORT = "/api/v1/agents/import"


@pytest.fixture
def story(api, agent, studio_conf):
    return play(api, studio_conf)


def test_an_export_while_a_block_is_being_played_ends_at_the_block_before(api, agent):
    turn_send(agent=agent, content="first")
    thread, _ = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    document = read_export(api.get(f"{DM}/export"))
    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    thread.join(10)

    assert [b["block"] for b in document["blocks"]] == [1]


# --- who may import, and names ------------------------------------------------------------------


def test_import_is_no_agent_name(api, admin_api, agent):
    refused = api.post(f"{DM}/fork", {"name": "import", "atBlock": 1}, format="json")

    assert admin_api.put(IMPORT, {"systemPrompt": "I import goods."}, format="json").status_code == 405
    assert admin_api.get(IMPORT).status_code == 405
    assert error_of(refused)["code"] == "invalid_name"


# --- bad files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [[], "agent", None, {}])
def test_a_body_that_is_no_agent_file_at_all_is_400(admin_api, body):
    response = admin_api.post(IMPORT, body, format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] in ("invalid_agent_file", "invalid_json")


def test_a_small_hand_written_file_imports(api, admin_api):
    document = {
        "format": "studio.agent",
        "version": 1,
        "name": "innkeeper",
        "config": {"systemPrompt": "You keep the inn.", "memory": {}},
        "memories": [
            {
                "name": "rooms",
                "description": "Who sleeps where",
                "content": "Room 2: Mara.",
                "open": False,
                "version": 1,
                "updatedAt": "2026-11-30T12:00:00Z",
                "updatedBy": "agent",
            }
        ],
    }

    response = admin_api.post(IMPORT, document, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["memory"] == {"maxOpenTokens": 4000}
    # Written by the import, now: not the time the file claims.
    memory = api.get("/api/v1/agents/innkeeper/memories").json()["memories"][0]
    assert memory["updatedBy"] == "import" and not memory["updatedAt"].startswith("2026-11-30")
    turn = api.post("/api/v1/agents/innkeeper/messages", {"content": "A room, please."}, format="json")
    assert turn.json()["turn"]["block"] == 1


def test_a_file_whose_memory_names_differ_only_in_their_encoding_is_refused(admin_api):
    memory = {"description": "d", "content": "c", "open": False, "version": 1, "updatedBy": "agent"}
    memory["updatedAt"] = "2026-11-30T12:00:00Z"
    document = {
        "format": "studio.agent",
        "version": 1,
        "name": "innkeeper",
        "config": {"systemPrompt": "You keep the inn.", "memory": {}},
        "memories": [{**memory, "name": "caf\u00e9"}, {**memory, "name": "cafe\u0301"}],
    }

    response = admin_api.post(IMPORT, document, format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_agent_file"
    assert "same name" in error_of(response)["message"]


def test_an_imported_memory_named_in_decomposed_form_is_kept_in_nfc_with_its_history(api, admin_api, agent):
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    turn_send(
        agent=agent, content=script(call("close_memory", name=nfc, description="d", content="The inn."))
    )
    document = read_export(api.get(f"{DM}/export"))
    document["memories"][0]["name"] = nfd
    for event in document["memoryHistory"]:
        event["name"] = nfd
    assert admin_api.delete(DM).status_code == 204

    assert admin_api.post(IMPORT, document, format="json").status_code == 201

    assert [m["name"] for m in api.get(f"{DM}/memories").json()["memories"]] == [nfc]
    assert set(MemoryEvent.objects.values_list("name", flat=True)) == {nfc}
    events = api.get(f"{DM}/memories/{nfc}/history").json()["events"]
    assert [e["change"] for e in events] == ["created", "imported"]


def test_a_history_of_opens_and_closes_round_trips_and_the_store_as_of_each_block_with_it(
    api, admin_api, agent
):
    turn_send(
        agent=agent, content=script(call("close_memory", name="quest", description="d", content="North."))
    )
    turn_send(agent=agent, content=script(call("open_memory", name="quest")))
    turn_send(agent=agent, content=script(call("close_memory", name="quest")))
    document = read_export(api.get(f"{DM}/export"))
    toggles = [e for e in document["memoryHistory"] if e["change"] in ("opened", "closed")]
    assert [e["after"] for e in toggles] == [{"open": True, "version": 1}, {"open": False, "version": 1}]
    assert admin_api.delete(DM).status_code == 204

    assert admin_api.post(IMPORT, document, format="json").status_code == 201

    for block, is_open in ((1, False), (2, True), (3, False)):
        memories = api.get(f"{DM}/memories?atBlock={block}").json()["memories"]
        assert [(m["content"], m["open"]) for m in memories] == [("North.", is_open)]


def test_a_history_of_writes_that_keep_only_what_they_changed_round_trips(api, admin_api, agent):
    turn_send(
        agent=agent, content=script(call("close_memory", name="quest", description="d", content="North."))
    )
    turn_send(agent=agent, content=script(call("open_memory", name="quest")))
    turn_send(agent=agent, content=script(call("close_memory", name="quest", description="Where to go")))
    turn_send(agent=agent, content=script(call("open_memory", name="quest")))
    turn_send(agent=agent, content=script(call("close_memory", name="quest", content="South.")))
    document = read_export(api.get(f"{DM}/export"))
    writes = [e["after"] for e in document["memoryHistory"] if e["change"] == "updated"]
    assert writes == [
        {"description": "Where to go", "open": True, "version": 2},
        {"content": "South.", "open": True, "version": 3},
    ]
    assert admin_api.delete(DM).status_code == 204

    assert admin_api.post(IMPORT, document, format="json").status_code == 201

    for block, shown in (
        (1, ("d", "North.")),
        (3, ("Where to go", "North.")),
        (5, ("Where to go", "South.")),
    ):
        memories = api.get(f"{DM}/memories?atBlock={block}").json()["memories"]
        assert [(m["description"], m["content"]) for m in memories] == [shown]


def test_an_open_in_a_file_must_say_whether_the_memory_is_open(api, admin_api, agent):
    turn_send(
        agent=agent, content=script(call("close_memory", name="quest", description="d", content="North."))
    )
    turn_send(agent=agent, content=script(call("open_memory", name="quest")))
    document = read_export(api.get(f"{DM}/export"))
    next(e for e in document["memoryHistory"] if e["change"] == "opened")["after"] = {"version": 1}
    assert admin_api.delete(DM).status_code == 204

    response = admin_api.post(IMPORT, document, format="json")

    assert response.status_code == 400
    assert "open" in error_of(response)["message"]


def edited_export(api, admin_api, agent) -> dict:
    """The file of an agent that wrote one memory, its content edited by
    game code; the agent itself deleted, so the file can take its name."""
    turn_send(
        agent=agent,
        content=script(call("close_memory", name="quest", description="What Mara wants", content="The key.")),
    )
    document = read_export(api.get(f"{DM}/export"))
    document["memories"][0]["content"] = "WRITTEN BY GAME CODE"
    assert admin_api.delete(DM).status_code == 204
    return document


def test_an_imported_store_says_who_imported_it_and_never_credits_the_agent_with_an_edit(
    api, admin_api, agent, designer
):
    document = edited_export(api, admin_api, agent)

    assert admin_api.post(IMPORT, document, format="json").status_code == 201

    [memory] = api.get(f"{DM}/memories").json()["memories"]
    assert (memory["content"], memory["updatedBy"]) == ("WRITTEN BY GAME CODE", "import")
    events = api.get(f"{DM}/memories/quest/history").json()["events"]
    # The file's own change is the file's, naming whom it credits; then the
    # import, where the studio's own history begins.
    assert [(e["change"], e["by"], e["fileBy"]) for e in events] == [
        ("created", "file", "agent"),
        ("imported", "import", None),
    ]
    note = events[-1]["note"]
    assert note.startswith("Imported by API key sk_") and note.endswith(" from a file posted to the API."), (
        note
    )
    assert events[-1]["after"]["content"] == "WRITTEN BY GAME CODE"
    assert not MemoryEvent.objects.filter(by__in=["agent", "compactor"]).exists()
    # As of its last block the store is what was imported, written by the import.
    [then] = api.get(f"{DM}/memories?atBlock=1").json()["memories"]
    assert (then["content"], then["updatedBy"]) == ("WRITTEN BY GAME CODE", "import")


def test_an_import_through_the_api_names_the_file_it_is_given(api, admin_api, agent):
    document = edited_export(api, admin_api, agent)

    response = admin_api.post(f"{IMPORT}?fileName=dm.studio-agent.json", document, format="json")

    assert response.status_code == 201, response.content
    events = api.get(f"{DM}/memories/quest/history").json()["events"]
    assert events[-1]["note"].endswith(" from 'dm.studio-agent.json'."), events[-1]["note"]
    too_long = admin_api.post(f"{IMPORT}?fileName={'x' * 256}", document, format="json")
    assert too_long.status_code == 400 and error_of(too_long)["details"][0]["field"] == "fileName"


def test_the_memories_page_tells_the_files_story_apart_from_the_studios_own(api, admin_api, agent, designer):
    document = edited_export(api, admin_api, agent)
    assert admin_api.post(f"{IMPORT}?fileName=dm.json", document, format="json").status_code == 201

    page = designer.get("/studio/ashmere/agents/dm/memories/").content.decode()

    own, told = page.split("As the file tells it", 1)
    assert 'data-change="imported" data-by="import"' in own and "Imported by API key sk_" in own
    assert "from &#x27;dm.json&#x27;." in own and "own history of the memory begins here" in own
    assert 'data-by="file" data-file-by="agent"' in told and "which names the agent" in told
    assert 'data-by="agent"' not in page  # nothing credited to the agent


def test_an_import_from_the_agents_page_names_who_imported_it_and_the_file(api, admin_api, agent, admin):
    document = edited_export(api, admin_api, agent)
    upload = SimpleUploadedFile("dm.studio-agent.json", json.dumps(document).encode(), "application/json")

    response = admin.post("/studio/ashmere/agents/import/", {"file": upload, "name": ""})

    assert response.status_code == 302, response.content.decode()[:2000]
    events = api.get(f"{DM}/memories/quest/history").json()["events"]
    assert events[-1]["note"] == "Imported by ines from 'dm.studio-agent.json'."
    page = admin.get("/studio/ashmere/agents/dm/memories/").content.decode()
    assert "Imported by ines from &#x27;dm.studio-agent.json&#x27;." in page


def test_a_fork_keeps_its_sources_history_as_the_studio_saw_it(api, agent):
    turn_send(
        agent=agent,
        content=script(call("close_memory", name="quest", description="What Mara wants", content="The key.")),
    )

    assert api.post(f"{DM}/fork", {"name": "dm-b", "atBlock": 1}, format="json").status_code == 201

    events = api.get("/api/v1/agents/dm-b/memories/quest/history").json()["events"]
    assert [(e["change"], e["by"], e["fileBy"]) for e in events] == [("created", "agent", None)]


def test_a_file_cannot_name_whom_a_change_of_its_own_is_credited_to_but_by_the_file(api, admin_api, agent):
    document = edited_export(api, admin_api, agent)
    document["memoryHistory"][0]["fileBy"] = "compactor"  # by: agent

    response = admin_api.post(IMPORT, document, format="json")

    assert response.status_code == 400
    assert "fileBy" in error_of(response)["message"]


# --- an export is written as it is read ------------------------------------------------------------


async def _drained(chunks) -> list[int]:
    return [len(chunk) async for chunk in chunks]


def test_an_export_is_streamed_in_the_bytes_the_whole_document_renders_to(api, designer, agent):
    for number in range(3):
        memory = call("close_memory", name=f"m{number}", description="d", content="é\u2028")
        turn_send(agent=agent, content=script(memory))

    from_api = streamed(api.get(f"{DM}/export"))
    from_page = streamed(designer.get("/studio/ashmere/agents/dm/export/"))

    document = {**agent_document(agent), "exportedAt": json.loads(from_api)["exportedAt"]}
    assert from_api == JSONRenderer().render(document)
    document = {**agent_document(agent), "exportedAt": json.loads(from_page)["exportedAt"]}
    assert from_page == json.dumps(document, cls=DjangoJSONEncoder, ensure_ascii=False).encode()


@pytest.mark.slow  # heavy by design: left out of `make test-fast` (#38)
def test_an_export_holds_a_batch_of_its_history_at_a_time_never_the_whole(api, agent):
    text = "x" * 10_000
    Block.objects.bulk_create(
        Block(agent=agent, number=n, status=TurnStatus.COMPLETED, entries=[user_entry(f"{n} {text}")])
        for n in range(1, 1_001)
    )
    MemoryEvent.objects.bulk_create(
        MemoryEvent(agent=agent, name="m", change="dropped", by="compactor", block=n, after={"content": text})
        for n in range(1, 1_001)
    )
    Agent.objects.filter(pk=agent.pk).update(last_block=1_000)
    response = api.get(f"{DM}/export")

    with CaptureQueriesContext(connection) as queries:
        tracemalloc.start()
        sizes = async_to_sync(_drained)(response.streaming_content)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()

    assert sum(sizes) > 20_000_000 and max(sizes) < 1_000_000
    assert peak < sum(sizes) / 4
    heavy = [q["sql"] for q in queries.captured_queries if '"entries"' in q["sql"] or '"after"' in q["sql"]]
    assert heavy and all("LIMIT 200" in sql for sql in heavy)
