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
from tests.support.live import connect, events_until, page_headers, refused_as_too_many, session_cookie
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
            event = await communicator.receive_json_from(timeout=60)
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

    closed = await refused.receive_output(timeout=60)
    assert closed == {"type": "websocket.close", "code": 4404, "reason": CLOSE_REASONS[4404]}
    await ours.disconnect()


async def test_a_bad_key_is_refused(define):
    await database_sync_to_async(define)("dm")
    communicator = await connect("/ws/v1/agents/dm/events", key="sk_nope_nope")

    assert await communicator.receive_output(timeout=60) == {
        "type": "websocket.close",
        "code": 4401,
        "reason": CLOSE_REASONS[4401],
    }


async def test_a_studio_page_of_a_member_hears_the_agent(define, game):
    agent = await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game)
    page = await connect("/ws/studio/ashmere/agents/dm/", headers=page_headers(cookie))
    assert (await page.receive_json_from())["type"] == "hello"

    await database_sync_to_async(turn_send)(agent=agent, content="hello")

    heard = [e["type"] for e in await events_until(page, "turn.finished")]
    assert heard == ["turn.started", "reply.delta", "turn.finished"]
    await page.disconnect()


async def test_a_signed_in_user_of_another_game_is_refused(define, game):
    await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game, member=False)
    page = await connect("/ws/studio/ashmere/agents/dm/", headers=page_headers(cookie))

    assert await page.receive_output(timeout=60) == {
        "type": "websocket.close",
        "code": 4404,
        "reason": CLOSE_REASONS[4404],
    }
    await page.disconnect()


async def page_socket_opens(cookie: bytes, *, origin: bytes, host: bytes, extra=()) -> bool:
    communicator = WebsocketCommunicator(
        application,
        "/ws/studio/ashmere/agents/dm/",
        headers=[*page_headers(cookie, origin=origin, host=host), *extra],
    )
    connected, _ = await communicator.connect(timeout=60)
    await communicator.disconnect()  # refused or not: the application ends
    return connected


@pytest.mark.parametrize(
    "origin, host",
    [
        (b"https://evil.example", b"localhost"),
        (b"http://127.0.0.1:9999", b"127.0.0.1:8000"),  # the studio's host, another port
        (b"http://localhost:8000", b"localhost"),
        (b"http://localhost", b"localhost:8000"),
        (b"https://localhost", b"localhost"),  # another scheme: not the page served over http
        (b"http://evil.localhost", b"localhost"),
        (b"null", b"localhost"),
        (b"http://localhost", b"evil.example"),  # a Host the studio does not serve
    ],
    ids=[
        "another-site",
        "another-port",
        "a-port-the-host-lacks",
        "no-port-the-host-has",
        "another-scheme",
        "a-subdomain",
        "null",
        "a-host-not-allowed",
    ],
)
async def test_a_page_of_another_origin_cannot_open_the_socket(define, game, origin, host):
    await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game)

    assert not await page_socket_opens(cookie, origin=origin, host=host)


async def test_a_page_of_the_studios_own_origin_opens_the_socket_on_any_port(define, game):
    await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game)

    assert await page_socket_opens(cookie, origin=b"http://127.0.0.1:8000", host=b"127.0.0.1:8000")


async def test_behind_the_proxy_the_pages_origin_is_its_https_one(define, game, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.ALLOWED_HOSTS = ["studio.example.com"]
    await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game)
    through_tls = [(b"x-forwarded-proto", b"https")]
    host = b"studio.example.com"

    assert await page_socket_opens(cookie, origin=b"https://studio.example.com", host=host, extra=through_tls)
    assert not await page_socket_opens(
        cookie, origin=b"http://studio.example.com", host=host, extra=through_tls
    )
    assert not await page_socket_opens(cookie, origin=b"https://studio.example.com", host=host)


async def test_a_trusted_origin_opens_the_socket_to_the_proxys_upstream_host(define, game, settings):
    settings.ALLOWED_HOSTS = ["studio.internal"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://studio.example.com", "https://*.games.example"]
    await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game)
    host = b"studio.internal"

    assert await page_socket_opens(cookie, origin=b"https://studio.example.com", host=host)
    assert await page_socket_opens(cookie, origin=b"https://ashmere.games.example", host=host)
    assert not await page_socket_opens(cookie, origin=b"https://studio.example.com:8443", host=host)
    assert not await page_socket_opens(cookie, origin=b"http://ashmere.games.example", host=host)


@pytest.mark.parametrize("path", ["/ws/v1/agents/%00/events", "/ws/studio/ashmere/agents/%00/"])
async def test_a_websocket_for_a_name_not_in_the_studios_form_is_closed_as_not_found(
    define, designer_key, game, path
):
    await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game)

    communicator = await connect(path, key=designer_key, headers=page_headers(cookie))

    assert await communicator.receive_output(timeout=60) == {
        "type": "websocket.close",
        "code": 4404,
        "reason": CLOSE_REASONS[4404],
    }
    await communicator.disconnect()


# --- what a listener may do, and how many a game may have ---------------------------------------


async def test_a_key_in_the_url_is_refused_saying_to_offer_it_as_a_subprotocol(define, designer_key):
    await database_sync_to_async(define)("dm")
    communicator = await connect(f"/ws/v1/agents/dm/events?key={designer_key}")

    error = await communicator.receive_json_from()

    assert error["type"] == "error" and error["code"] == "unauthenticated"
    assert "bearer.<key>" in error["message"] and designer_key not in error["message"]
    assert await communicator.receive_output(timeout=60) == {
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
    assert await communicator.receive_output(timeout=60) == {
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
    await database_sync_to_async(agent_define)(
        game=other_game, name="dm", definition=AgentDefinition(), by=None, via="command"
    )
    cookie = await database_sync_to_async(session_cookie)(game)
    page = await connect("/ws/studio/ashmere/agents/dm/", headers=page_headers(cookie))
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
