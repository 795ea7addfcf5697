"""The live event stream over WebSocket, on the real ASGI application and
the Redis channel layer: what a key hears, what a page hears, and when."""

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from agents.consumers import CLOSE_REASONS
from agents.models import Block
from agents.services import AgentDefinition, agent_define
from memories.models import Memory
from studio.asgi import application
from tests.support.live import connect, events_until, refused_as_too_many, session_cookie
from tests.support.sending import turn_send

from ..conftest import call, script

pytestmark = pytest.mark.django_db(transaction=True)


async def test_an_api_key_hears_its_agents_events_each_after_its_commit(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    communicator = await connect("/ws/v1/agents/dm/events", key=designer_key)
    assert (await communicator.receive_json_from())["type"] == "hello"

    send = asyncio.ensure_future(
        database_sync_to_async(turn_send)(
            agent=agent, content=script(call("close_memory", name="quest", description="Now", content="Key."))
        )
    )
    events = await events_until(communicator, "turn.finished")
    await send

    types = [e["type"] for e in events]
    assert types == ["turn.started", "memory.changed", "tool_call", "reply.delta", "turn.finished"]
    # Each event arrives only after what it reports can be read back.
    assert await database_sync_to_async(Memory.objects.filter(name="quest").exists)()
    assert events[2]["name"] == "close_memory" and events[2]["isError"] is False
    assert events[4]["status"] == "completed" and events[4]["cost"]["total"]
    await communicator.disconnect()


async def test_what_an_event_reports_is_already_committed_when_it_arrives(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    communicator = await connect("/ws/v1/agents/dm/events", key=designer_key)
    await communicator.receive_json_from()
    seen_in_db = []

    async def watch():
        while True:
            event = await communicator.receive_json_from(timeout=5)
            if event["type"] == "tool_call":
                block = await database_sync_to_async(Block.objects.get)(agent=agent, number=1)
                seen_in_db.append(any(e["type"] == "tool_call" for e in block.entries))
            if event["type"] == "turn.finished":
                return

    watcher = asyncio.ensure_future(watch())
    await database_sync_to_async(turn_send)(agent=agent, content=script(call("open_memory", name="nope")))
    await watcher

    assert seen_in_db == [True]
    await communicator.disconnect()


async def test_another_games_key_is_refused_and_hears_nothing(define, outsider_key, designer_key):
    agent = await database_sync_to_async(define)("dm")
    refused = await connect("/ws/v1/agents/dm/events", key=outsider_key)
    ours = await connect("/ws/v1/agents/dm/events", key=designer_key)
    await ours.receive_json_from()

    await database_sync_to_async(turn_send)(agent=agent, content="hello")
    await events_until(ours, "turn.finished")

    closed = await refused.receive_output(timeout=2)
    assert closed == {"type": "websocket.close", "code": 4404, "reason": CLOSE_REASONS[4404]}
    await ours.disconnect()


async def test_a_bad_key_is_refused(define):
    await database_sync_to_async(define)("dm")
    communicator = await connect("/ws/v1/agents/dm/events", key="sk_nope_nope")

    assert await communicator.receive_output(timeout=2) == {
        "type": "websocket.close",
        "code": 4401,
        "reason": CLOSE_REASONS[4401],
    }


async def test_a_studio_page_of_a_member_hears_the_agent(define, game):
    agent = await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game)
    page = await connect(
        "/ws/studio/ashmere/agents/dm/", headers=[(b"cookie", cookie), (b"origin", b"http://localhost")]
    )
    assert (await page.receive_json_from())["type"] == "hello"

    await database_sync_to_async(turn_send)(agent=agent, content="hello")

    heard = [e["type"] for e in await events_until(page, "turn.finished")]
    assert heard == ["turn.started", "reply.delta", "turn.finished"]
    await page.disconnect()


async def test_a_signed_in_user_of_another_game_is_refused(define, game):
    await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game, member=False)
    page = await connect(
        "/ws/studio/ashmere/agents/dm/", headers=[(b"cookie", cookie), (b"origin", b"http://localhost")]
    )

    assert await page.receive_output(timeout=2) == {
        "type": "websocket.close",
        "code": 4404,
        "reason": CLOSE_REASONS[4404],
    }


async def test_a_page_on_another_site_cannot_open_the_socket(define, game):
    await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game)
    communicator = WebsocketCommunicator(
        application,
        "/ws/studio/ashmere/agents/dm/",
        headers=[(b"cookie", cookie), (b"origin", b"https://evil.example")],
    )

    connected, _ = await communicator.connect(timeout=5)

    assert not connected


# --- what a listener may do, and how many a game may have ---------------------------------------


async def test_a_key_in_the_url_is_refused_saying_to_offer_it_as_a_subprotocol(define, designer_key):
    await database_sync_to_async(define)("dm")
    communicator = await connect(f"/ws/v1/agents/dm/events?key={designer_key}")

    error = await communicator.receive_json_from()

    assert error["type"] == "error" and error["code"] == "unauthenticated"
    assert "bearer.<key>" in error["message"] and designer_key not in error["message"]
    assert await communicator.receive_output(timeout=2) == {
        "type": "websocket.close",
        "code": 4401,
        "reason": CLOSE_REASONS[4401],
    }


async def test_a_key_in_the_url_is_heard_when_the_studio_allows_it(define, designer_key, studio_conf):
    studio_conf(WS_QUERY_KEYS=True)
    await database_sync_to_async(define)("dm")

    communicator = await connect(f"/ws/v1/agents/dm/events?key={designer_key}")

    assert (await communicator.receive_json_from())["type"] == "hello"
    await communicator.disconnect()


@pytest.mark.parametrize("frame", [{"text_data": '{"type": "ping"}'}, {"bytes_data": b"\x00\xff"}])
async def test_a_listener_that_sends_a_frame_is_closed_without_its_frame_being_read(
    define, designer_key, frame
):
    await database_sync_to_async(define)("dm")
    communicator = await connect("/ws/v1/agents/dm/events", key=designer_key)
    assert (await communicator.receive_json_from())["type"] == "hello"

    await communicator.send_to(**frame)

    error = await communicator.receive_json_from()
    assert error["type"] == "error" and error["code"] == "listen_only"
    assert await communicator.receive_output(timeout=2) == {
        "type": "websocket.close",
        "code": 4400,
        "reason": CLOSE_REASONS[4400],
    }


@pytest.mark.usefixtures("stream_slots_cleared")
async def test_a_game_holds_at_most_its_streams_open_and_one_that_closes_frees_its_place(
    define, game, other_game, designer_key, outsider_key, studio_conf
):
    studio_conf(MAX_STREAMS_PER_GAME=2)
    await database_sync_to_async(define)("dm")
    await database_sync_to_async(agent_define)(game=other_game, name="dm", definition=AgentDefinition())
    cookie = await database_sync_to_async(session_cookie)(game)
    page = await connect(
        "/ws/studio/ashmere/agents/dm/", headers=[(b"cookie", cookie), (b"origin", b"http://localhost")]
    )
    listener = await connect("/ws/v1/agents/dm/events", key=designer_key)
    for opened in (page, listener):
        assert (await opened.receive_json_from())["type"] == "hello"

    await refused_as_too_many(await connect("/ws/v1/agents/dm/events", key=designer_key))
    elsewhere = await connect("/ws/v1/agents/dm/events", key=outsider_key)
    assert (await elsewhere.receive_json_from())["type"] == "hello"

    await page.disconnect()
    again = await connect("/ws/v1/agents/dm/events", key=designer_key)
    assert (await again.receive_json_from())["type"] == "hello"
    for communicator in (listener, elsewhere, again):
        await communicator.disconnect()
