"""Live events over WebSocket: forward what the domain publishes, decide
nothing.

Two doors onto the same stream of an agent's events:
- API consumers: `/ws/v1/agents/{name}/events?key=<api key>`;
- the studio's pages: `/ws/studio/{game}/agents/{name}/` with the signed-in
  user's session (the user must be a member of the game).
Either way a listener joins the agent's group and its game's group
(`budget.low`), and hears nothing of any other game.
"""

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from studio import metrics
from studio.events import agent_group, game_group
from studio.keys import apikey_verify
from studio.models import Membership

from .models import Agent

# Close codes: the WebSocket range for applications (4000–4999).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


class AgentEventsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        agent, refusal = await database_sync_to_async(self._resolve)()
        if agent is None:
            # Accept-then-close lets the client read why (a close before
            # accept is a bare 403 to the browser).
            await self.accept()
            await self.close(code=refusal)
            return
        self.groups_joined = [agent_group(agent.pk), game_group(agent.game_id)]
        await self._join()
        await self.accept()
        metrics.ws_connected()
        self.is_counted = True
        await self.send_json({"type": "hello", "agent": agent.name, "game": agent.game.slug})
        self.rejoiner = asyncio.ensure_future(self._keep_joined())

    async def _join(self):
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)

    async def _keep_joined(self):
        """Join the groups again now and then: if Redis restarted and lost
        them, the listener hears events again without reconnecting."""
        while True:
            await asyncio.sleep(settings.STUDIO["WS_REJOIN_SECONDS"])
            try:
                await self._join()
            except Exception:  # Redis still away: try at the next tick
                pass

    def _resolve(self):
        """The agent this connection may hear, or (None, close code)."""
        route = self.scope["url_route"]["kwargs"]
        game_id = self._game_id(route)
        if game_id is None:
            return None, CLOSE_UNAUTHENTICATED
        agent = Agent.objects.select_related("game").filter(game_id=game_id, name=route["name"]).first()
        if agent is None or ("game" in route and agent.game.slug != route["game"]):
            return None, CLOSE_NOT_FOUND
        return agent, None

    def _game_id(self, route) -> int | None:
        if "game" in route:  # a studio page: the session's user must belong to the game
            user = self.scope.get("user")
            if user is None or not user.is_authenticated:
                return None
            membership = Membership.objects.filter(user=user, game__slug=route["game"]).first()
            return membership.game_id if membership else -1
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        key = apikey_verify((query.get("key") or [""])[0])
        return key.game_id if key else None

    async def disconnect(self, code):
        if getattr(self, "is_counted", False):
            metrics.ws_disconnected()
            self.is_counted = False
        if getattr(self, "rejoiner", None):
            self.rejoiner.cancel()
        for group in getattr(self, "groups_joined", []):
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception:  # the layer is away; the membership expires on its own
                pass

    async def studio_event(self, message):
        await self.send_json(message["event"])
