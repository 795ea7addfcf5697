"""Live events over WebSocket: forward what the domain publishes, decide
nothing.

Two doors onto the same stream of an agent's events:
- API consumers: `/ws/v1/agents/{name}/events`, with the API key offered as
  a subprotocol (`Sec-WebSocket-Protocol: studio.v1, bearer.<key>`; the
  answer is `studio.v1`, never the key) — or as `?key=<api key>` where
  STUDIO_WS_QUERY_KEYS allows it (a URL ends up in proxies' logs);
- the studio's pages: `/ws/studio/{game}/agents/{name}/` with the signed-in
  user's session (the user must be a member of the game, and the session
  still signed in: signing out, or a password change, closes it).
Either way a listener joins the agent's group and hears nothing of any other
game, and holds one of its game's stream slots (studio/runtime/slots.py)
while it is open. `hello` carries the seq it starts after (the agent's
newest, or the `since` given, or null while the agent has no events).
`?since=<seq>` first replays the buffered events after
that seq (or says `resync` when the buffer no longer reaches back), then
goes on live. Listeners only listen: a client that sends anything is closed,
its frame unread. A socket that cannot be served because the database or
Redis is away is closed with 4503 after an `error` event (`unavailable`):
reconnect (with `since`) in a moment (studio/live/wsoutage.py).
"""

import asyncio
import logging
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from agents.models import Agent
from agents.selectors import agent_name_is_possible
from studio.auth.authentication import session_signs_in
from studio.auth.keys import apikey_is_live, apikey_verify
from studio.http.params import whole_number
from studio.live import event_types, wsoutage
from studio.live.events import EventCursor, agent_events_head, agent_group
from studio.models import Membership
from studio.ops import metrics
from studio.runtime.slots import TooManyStreams, stream_slot_give_back, stream_slot_renew, stream_slot_take

# Close codes: the WebSocket range for applications (4000–4999).
CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_MANY = 4429
CLOSE_UNAVAILABLE = wsoutage.CLOSE_UNAVAILABLE
# A close's reason (at most 123 bytes): what a client reads in its close event.
CLOSE_REASONS = {
    CLOSE_BAD_REQUEST: "Bad request: see the error event sent before the close.",
    CLOSE_UNAUTHENTICATED: "No valid key (or page session) that may hear this agent.",
    CLOSE_NOT_FOUND: "No agent of that name in this key's game.",
    CLOSE_TOO_MANY: "This game holds as many live streams as it may; close one and try again.",
    CLOSE_UNAVAILABLE: wsoutage.CLOSE_UNAVAILABLE_REASON,
}

log = logging.getLogger(__name__)

SUBPROTOCOL = "studio.v1"
BEARER = "bearer."
SINCE_MAX_DIGITS = 19

KEY_IN_URL = event_types.error(
    code="unauthenticated",
    message=(
        "A key in the URL is refused: URLs end up in proxy and access logs. Offer it as a "
        "subprotocol instead: new WebSocket(url, ['studio.v1', 'bearer.<key>'])."
    ),
)
LISTEN_ONLY = event_types.error(
    code="listen_only", message="This socket only sends events; a client that sends anything is closed."
)


class AgentEventsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        try:
            await self._open()
        except Exception as error:
            if not wsoutage.is_outage(error):
                raise
            log.warning("a WebSocket was refused: the database or Redis is unavailable", exc_info=True)
            await self._unavailable()

    async def _unavailable(self):
        """Close 4503, giving back what the opening had taken."""
        if getattr(self, "slot", None):
            await sync_to_async(stream_slot_give_back, thread_sensitive=False)(self.slot)
            self.slot = None
        if getattr(self, "is_accepted", False):
            return await self._close(CLOSE_UNAVAILABLE, wsoutage.UNAVAILABLE)
        await self._refuse(CLOSE_UNAVAILABLE, wsoutage.UNAVAILABLE)

    async def _open(self):
        offered = self.scope.get("subprotocols") or []
        self.subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered else None
        if "key" in self._query() and not settings.STUDIO["WS_QUERY_KEYS"]:
            return await self._refuse(CLOSE_UNAUTHENTICATED, KEY_IN_URL)
        agent, refusal = await database_sync_to_async(self._resolve)()
        if agent is None:
            return await self._refuse(refusal)
        since = self._query().get("since")
        if since is not None and whole_number(since, max_digits=SINCE_MAX_DIGITS) is None:
            message = "since must be the seq of an event you received: a whole number from 0 up."
            return await self._refuse(
                CLOSE_BAD_REQUEST, event_types.error(code="invalid_since", message=message)
            )
        try:
            self.slot = await sync_to_async(stream_slot_take, thread_sensitive=False)(agent.game_id)
        except TooManyStreams as refused:
            return await self._refuse(
                CLOSE_TOO_MANY, event_types.error(code=refused.code, message=refused.message)
            )
        self.cursor = EventCursor(agent.pk)
        self.groups_joined = [agent_group(agent.pk)]
        # Join before replaying: an event sent meanwhile is then both
        # replayed and heard live, and the cursor drops the second copy.
        await self._join()
        if since is None:
            # This listener starts after the agent's newest event as it joined:
            # one sent since is heard live. `hello` says which, so a client
            # that drops before it hears anything can resume from there.
            self.cursor.seq = await sync_to_async(agent_events_head, thread_sensitive=False)(agent.pk)
        await self.accept(self.subprotocol)
        self.is_accepted = True
        metrics.ws_connected()
        self.is_counted = True
        start = self.cursor.seq if since is None else int(since)
        await self.send_json(event_types.hello(agent=agent.name, game=agent.game.slug, seq=start))
        if since is not None:
            await self._forward(await self.cursor.since(int(since)))
        self.rejoiner = asyncio.ensure_future(self._keep_joined())

    async def _refuse(self, code: int, event: dict | None = None):
        # Accept-then-close lets the client read why (a close before
        # accept is a bare 403 to the browser).
        await self.accept(self.subprotocol)
        await self._close(code, event)

    async def _close(self, code: int, event: dict | None = None):
        self.is_closing = True
        if event is not None:
            await self.send_json(event)
        await self.close(code=code, reason=CLOSE_REASONS[code])

    async def websocket_receive(self, message):
        """Listeners only listen: whatever a client sends closes it, unread
        (nothing it sends is parsed on the event loop)."""
        if not getattr(self, "is_closing", False):
            await self._close(CLOSE_BAD_REQUEST, LISTEN_ONLY)

    async def _forward(self, events: list[dict] | None):
        if events is None:
            message = "Events were missed that are no longer kept: read the agent again through the REST API."
            await self.send_json(event_types.resync(seq=self.cursor.seq, message=message))
            return
        for event in events:
            await self.send_json(event)

    async def _join(self):
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)

    async def _keep_joined(self):
        """Now and then renew this listener's stream slot, look again
        whether it may still hear the agent (closing with 4401 once its key,
        its page's session or its user's membership is gone), and join the groups again: if Redis
        restarted and lost them, the listener hears events again without
        reconnecting."""
        while True:
            await asyncio.sleep(settings.STUDIO["WS_REJOIN_SECONDS"])
            await sync_to_async(stream_slot_renew, thread_sensitive=False)(self.slot)
            try:
                allowed = await database_sync_to_async(self._still_allowed)()
            except Exception:  # the database is away: look again at the next tick
                allowed = True
            if not allowed:
                await self._close(CLOSE_UNAUTHENTICATED)
                return
            try:
                await self._join()
            except Exception:  # Redis still away: try at the next tick
                pass

    def _query(self) -> dict[str, str]:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        return {name: values[0] for name, values in query.items()}

    def _resolve(self):
        """The agent this connection may hear, or (None, close code)."""
        route = self.scope["url_route"]["kwargs"]
        game_id = self._game_id(route)
        if game_id is None:
            return None, CLOSE_UNAUTHENTICATED
        agent = (
            Agent.objects.select_related("game").filter(game_id=game_id, name=route["name"]).first()
            if agent_name_is_possible(route["name"])
            else None
        )
        if agent is None or ("game" in route and agent.game.slug != route["game"]):
            return None, CLOSE_NOT_FOUND
        return agent, None

    def _game_id(self, route) -> int | None:
        if "game" in route:  # a studio page: the session's user must belong to the game
            user = self.scope.get("user")
            if user is None or not user.is_authenticated:
                return None
            membership = Membership.objects.filter(user=user, game__slug=route["game"]).first()
            self.member = (
                user.pk,
                membership.game_id if membership else None,
                self.scope["session"].session_key,
            )
            return membership.game_id if membership else -1
        key = apikey_verify(self._key_text())
        self.key_id = key.pk if key else None
        return key.game_id if key else None

    def _key_text(self) -> str:
        for protocol in self.scope.get("subprotocols") or []:
            if protocol.startswith(BEARER):
                return protocol[len(BEARER) :]
        return self._query().get("key", "")

    def _still_allowed(self) -> bool:
        if getattr(self, "key_id", None) is not None:
            return apikey_is_live(self.key_id)
        # A page: its session must still sign its user in, and the user still be a member.
        user_id, game_id, session_key = self.member
        return (
            session_signs_in(session_key, user_id)
            and Membership.objects.filter(user_id=user_id, game_id=game_id, user__is_active=True).exists()
        )

    async def disconnect(self, code):
        if getattr(self, "is_counted", False):
            metrics.ws_disconnected()
            self.is_counted = False
        if getattr(self, "rejoiner", None):
            self.rejoiner.cancel()
        if getattr(self, "slot", None):
            await sync_to_async(stream_slot_give_back, thread_sensitive=False)(self.slot)
            self.slot = None
        for group in getattr(self, "groups_joined", []):
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception:  # the layer is away; the membership expires on its own
                pass

    async def studio_event(self, message):
        await self._forward(await self.cursor.live(message["event"]))
