"""Listening to the live event stream in-process: WebSockets on the real
ASGI application, the agent's event buffer, a turn played meanwhile."""

import asyncio
import contextlib

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test import Client

from agents.consumers import CLOSE_REASONS
from studio.asgi import application
from studio.live.events import agent_events_buffer
from tests.conftest import call, page_user, wait_for

QUEST = call("close_memory", name="quest", description="Now", content="Key.")
# The events of a turn that plays QUEST, then says "ok".
QUEST_EVENTS = ["turn.started", "memory.changed", "tool_call", "reply.delta", "turn.finished"]


# Every socket a test opened here, disconnected when it ends (`sockets_closed`).
OPENED: list[WebsocketCommunicator] = []


async def connect(path, *, key=None, headers=()):
    """A WebSocket to `path`, with `key` offered as its subprotocol."""
    subprotocols = ["studio.v1", f"bearer.{key}"] if key else None
    communicator = WebsocketCommunicator(application, path, headers=list(headers), subprotocols=subprotocols)
    OPENED.append(communicator)
    connected, _ = await communicator.connect(timeout=60)
    assert connected
    return communicator


async def sockets_close() -> None:
    """Disconnect every socket a test opened and left open — a refused one
    too, whose consumer still listens on the channel layer: left to the end
    of the test's event loop, the cancel of its receive can hang it."""
    while OPENED:
        communicator = OPENED.pop()
        with contextlib.suppress(Exception):
            # A consumer whose channel-layer receive holds the process's
            # Redis read does not end on a disconnect; it is cancelled once
            # this time has passed, so waiting longer only slows the suite.
            await communicator.disconnect(timeout=3)


async def events_until(communicator, last_type, timeout=60):
    events = []
    while True:
        event = await communicator.receive_json_from(timeout=timeout)
        events.append(event)
        if event["type"] == last_type:
            return events


def page_headers(cookie: bytes, *, origin: bytes = b"http://localhost", host: bytes = b"localhost"):
    """What a browser on the studio's page at `origin` sends with its WebSocket: the page's
    session cookie, the Host it connects to, its Origin."""
    return [(b"cookie", cookie), (b"host", host), (b"origin", origin)]


def session_cookie(game, role="designer", member=True):
    """The Cookie header of a page user signed in (a member of `game`, or not)."""
    client = Client()
    client.force_login(page_user("mara", game if member else None, role))
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def refused_as_too_many(communicator):
    """The socket is told its game holds too many streams, then closed."""
    error = await communicator.receive_json_from()
    assert error["type"] == "error" and error["code"] == "too_many_streams"
    assert "STUDIO_MAX_STREAMS_PER_GAME" in error["message"]
    closed = await communicator.receive_output(timeout=60)
    assert closed == {"type": "websocket.close", "code": 4429, "reason": CLOSE_REASONS[4429]}


async def buffered_until(agent, predicate):
    """Wait until the newest event in the agent's buffer is what `predicate` looks for."""

    def arrived():
        _, events = agent_events_buffer(agent.pk)
        return bool(events) and predicate(events[-1])

    # Generous: a thousand events take a while on a busy machine.
    await database_sync_to_async(wait_for)(arrived, timeout=60)


def in_background(fn, **kwargs):
    """fn in a thread of its own (not the one database_sync_to_async shares)."""

    def run():
        try:
            return fn(**kwargs)
        finally:
            connection.close()

    return asyncio.ensure_future(asyncio.to_thread(run))
