"""Looking changes nothing: every GET route of the API (each one the schema
documents, the time views at every block, a replay and its copy), the
agent's pages (the agent as of every block too) and a WebSocket listener at
each door, visited for an agent with history, leave every table exactly as
it was — the same rows, the same ids, the same times. Nor does replaying
the agent change anything of it."""

import re

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.apps import apps
from django.test import Client

from studio.asgi import application
from studio.ops import health
from tests.support.live import page_headers
from tests.support.time_story import DM, play

# channels-redis keeps locks bound to the event loop of the test that used them.
from ..live.conftest import channel_locks_of_this_test_only  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

METRICS_TOKEN = "inspectors-metrics-token"


def database_state() -> dict:
    return {model._meta.db_table: list(model.objects.order_by("pk").values()) for model in apps.get_models()}


def get_paths(api, story, replay: dict, live: dict) -> list[str]:
    """Every GET path the schema documents, its parameters filled in from
    the story and its replay, and the time views at every block; a live
    replay's copy's too."""
    schema = api.get("/api/v1/schema/?format=json").json()
    values = {
        "name": "dm",
        "turn_id": story[2]["id"],
        "checkpoint": "1",
        "memory": "quest",
        "replay_id": replay["id"],
        "number": "1",
    }
    paths = [
        re.sub(r"{(\w+)}", lambda match: values[match[1]], path)
        for path, operations in schema["paths"].items()
        if "get" in operations
    ]
    for number in range(1, len(story) + 1):
        paths += [f"{DM}/memories?atBlock={number}", f"{DM}/context?atBlock={number}"]
    for name in ("npcs", "bells"):
        paths.append(f"{DM}/memories/{name}/history")
    copy = f"/api/v1/agents/{live['replayAgent']}"
    paths.append(f"{DM}/replays/{replay['id']}?memoriesAt={replay['through']}")
    paths.append(f"{DM}/replays/{live['id']}?memoriesAt={live['fromBlock'] - 1}")
    paths += [
        f"{copy}/memories?atBlock=5",
        f"{copy}/context?atBlock=6",
        f"{copy}/history",
        f"{copy}/checkpoints",
    ]
    return paths + [
        "/api/v1/agents/dm/checkpoints/2",
        f"/api/v1/billing/lines?turn={story[2]['id']}",
        "/api/v1/schema/",
        "/healthz",
        "/readyz",
    ]


PAGES = [
    "/studio/",
    "/studio/ashmere/agents/",
    "/studio/ashmere/agents/dm/",
    "/studio/ashmere/agents/dm/?fragment=history",
    "/studio/ashmere/agents/dm/?fragment=timeline",
    "/studio/ashmere/agents/dm/checkpoints/",
    "/studio/ashmere/agents/dm/revisions/",
    "/studio/ashmere/agents/dm/revisions/?from=1&to=1",
    "/studio/ashmere/agents/dm/export/",
    "/studio/ashmere/agents/dm/memories/",
    "/studio/ashmere/billing/",
]


async def listen(path: str, headers=(), subprotocols=None) -> dict:
    """Connect a WebSocket listener, replaying every kept event; its first message."""
    communicator = WebsocketCommunicator(application, path, headers=list(headers), subprotocols=subprotocols)
    connected, _ = await communicator.connect(timeout=60)
    assert connected
    hello = await communicator.receive_json_from(timeout=60)
    await communicator.disconnect()
    return hello


@pytest.mark.slow  # heavy by design: left out of `make test-fast` (#38)
def test_visiting_every_get_route_and_page_changes_nothing(
    api, admin_api, admin_key, agent, studio_conf, designer, settings
):
    story = play(api, studio_conf)
    replay = replay_made(api)
    studio_conf(COMPACTION_RUNNER="none")  # queued, and left so: its copy is there
    live = replay_made(api)
    paths = get_paths(api, story, replay, live)
    assert f"{DM}/export" in paths and f"{DM}/memories/quest/history" in paths
    pages = PAGES + [f"/studio/ashmere/agents/dm/blocks/{n}/" for n in range(1, len(story) + 1)]
    replay_page = f"/studio/ashmere/agents/dm/replays/{replay['id']}/"
    pages += [
        replay_page,
        replay_page + "?fragment=replay",
        replay_page + "use/",
        "/studio/ashmere/agents/dm/replays/",
    ]
    pages.append(f"/studio/ashmere/agents/{live['replayAgent']}/blocks/6/")
    cookie = f"sessionid={designer.cookies['sessionid'].value}".encode()
    # A key's first use is recorded (its last_used_at); uses within the next
    # minutes write nothing, and those are what this test makes.
    admin_api.get("/api/v1/agents")
    before = database_state()

    # Asked with the metrics token, /readyz names what each check found.
    settings.STUDIO_METRICS_TOKEN = METRICS_TOKEN
    operator = Client(headers={"authorization": f"Bearer {METRICS_TOKEN}"})
    responses = {path: (operator if path == "/readyz" else admin_api).get(path) for path in paths}
    answers = {path: response.status_code for path, response in responses.items()}
    shown = {page: designer.get(page).status_code for page in pages}
    heard = [
        async_to_sync(listen)(
            "/ws/v1/agents/dm/events?since=0", subprotocols=["studio.v1", f"bearer.{admin_key}"]
        ),
        async_to_sync(listen)("/ws/studio/ashmere/agents/dm/?since=0", page_headers(cookie)),
    ]

    readiness = responses["/readyz"]
    if readiness.status_code == 503:
        # Each check has 1 s: a loaded machine can take longer, and then —
        # and only then — this process says it is not ready.
        needed = {name: readiness.json()["checks"][name] for name in health.NEEDED}
        assert all(found == health.OK or found.startswith("timed out") for found in needed.values()), needed
        del answers["/readyz"]
    assert {path: status for path, status in answers.items() if status != 200} == {}
    assert {page: status for page, status in shown.items() if status != 200} == {}
    assert [message["type"] for message in heard] == ["hello", "hello"]
    after = database_state()
    assert {table for table in before if before[table] != after[table]} == set()


def replay_made(api) -> dict:
    """A replay of the story's last three blocks, with memory off."""
    body = {"fromBlock": 7, "definition": {"memory": None}}
    response = api.post(f"{DM}/replays", body, format="json")
    assert response.status_code == 202, response.content
    return api.get(response["Location"]).json()["replay"]


def agent_state(agent_id: int) -> dict:
    """Every row of the agent: its own, and each row of a table that names
    it (but replays, its replays' own records) or its cost lines."""
    from agents.models import Agent, Replay
    from billing.models import CostLine

    state = {"agent": list(Agent.objects.filter(pk=agent_id).values())}
    for model in apps.get_models():
        names = {field.name for field in model._meta.concrete_fields}
        if "agent" in names and model is not Replay:
            state[model._meta.db_table] = list(
                model.objects.filter(agent_id=agent_id).order_by("pk").values()
            )
    state["lines"] = list(CostLine.objects.filter(agent_name="dm").order_by("pk").values())
    return state


def test_a_replay_changes_nothing_of_the_agent_it_replays(api, agent, studio_conf):
    play(api, studio_conf)
    before = agent_state(agent.pk)
    assert before["agents_block"] and before["memories_memory"] and before["agents_checkpoint"]

    replays = [replay_made(api)]
    body = {
        "fromBlock": 1,
        "definition": {"systemPrompt": "Someone else.", "compaction": {"type": "sliding-window"}},
    }
    replays.append(api.get(api.post(f"{DM}/replays", body, format="json")["Location"]).json()["replay"])

    assert [replay["status"] for replay in replays] == ["completed", "completed"]
    after = agent_state(agent.pk)
    assert {table for table in before if before[table] != after[table]} == set()
