"""A WebSocket that cannot be served because the database or Redis is away
is closed with 4503 and a reason, after an `error` event (`unavailable`)
saying to reconnect — never answered with an HTTP 500 to its handshake,
nor cut with 1011.

The consumer refuses so itself when its own work fails (`is_outage`);
`ClosedOnOutage`, around every WebSocket route, does it for what fails
before or beside the consumer's own code: a page session read from the
database, the channel layer's receive failing as the socket opens."""

import json
import logging
from contextlib import suppress

import redis.exceptions
from django import db

from studio.live import event_types

log = logging.getLogger(__name__)

CLOSE_UNAVAILABLE = 4503
# At most 123 bytes: what a client reads in its close event.
CLOSE_UNAVAILABLE_REASON = "The studio's database or Redis is unavailable for a moment: reconnect shortly."

UNAVAILABLE = event_types.error(
    code="unavailable",
    message=(
        "The studio cannot serve live events right now: its database or Redis is unavailable. "
        "Reconnect in a moment (with ?since=<the last seq you received>, so nothing is missed)."
    ),
)

# What an outage raises: the database's connection errors (a pool with none
# free in time among them), Redis's, and the sockets' own.
OUTAGES = (
    db.OperationalError,
    db.InterfaceError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    ConnectionError,
    TimeoutError,
)


def is_outage(error: BaseException) -> bool:
    return isinstance(error, OUTAGES)


class ClosedOnOutage:
    """ASGI middleware for WebSocket routes: an outage error escaping the
    application is answered with the close above (accepting the handshake
    first when nothing answered it yet, so the client can read why)."""

    def __init__(self, application, *, subprotocol: str):
        self.application, self.subprotocol = application, subprotocol

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.application(scope, receive, send)
        answered = False

        async def sending(message):
            nonlocal answered
            answered = answered or message["type"] in ("websocket.accept", "websocket.close")
            await send(message)

        try:
            await self.application(scope, receive, sending)
        except Exception as error:
            if not is_outage(error):
                raise
            log.warning("a WebSocket was closed: the database or Redis is unavailable", exc_info=True)
            await self._close(scope, send, accept=not answered)

    async def _close(self, scope, send, *, accept: bool) -> None:
        with suppress(Exception):  # the socket may be gone already
            if accept:
                offered = scope.get("subprotocols") or []
                chosen = self.subprotocol if self.subprotocol in offered else None
                await send({"type": "websocket.accept", "subprotocol": chosen})
            await send({"type": "websocket.send", "text": json.dumps(UNAVAILABLE)})
            await send(
                {"type": "websocket.close", "code": CLOSE_UNAVAILABLE, "reason": CLOSE_UNAVAILABLE_REASON}
            )
