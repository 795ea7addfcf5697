"""Live events: small JSON dicts sent to one channel-layer group per agent,
only once the change they report is committed.

With the Redis layer, events are handed to one background thread that
keeps its own event loop (and so its Redis connections) and sends them one
at a time, in the order they were published: a send does not wait on Redis
and does not open a connection per event. The in-process layer lives on
the server's own loop, so it is called there directly.
"""

import asyncio
import logging
import threading

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def agent_group(agent_id: int) -> str:
    return f"agent.{agent_id}"


def game_group(game_id: int) -> str:
    """Events about the whole game (budget.low); every listener to one of
    the game's agents hears them too."""
    return f"game.{game_id}"


class _Publisher:
    """A daemon thread running an event loop that drains a queue of
    (group, message) into the channel layer, in order."""

    def __init__(self, layer):
        self.layer = layer
        self.loop = asyncio.new_event_loop()
        self.queue: asyncio.Queue | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._run, name="event-publisher", daemon=True).start()
        self.ready.wait(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.queue = asyncio.Queue()
        self.loop.call_soon(self.ready.set)
        self.loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        while True:
            group, message = await self.queue.get()
            try:
                await self.layer.group_send(group, message)
            except Exception:  # a lost event must never break the publisher
                log.warning("could not publish %s to %s", message["event"].get("type"), group, exc_info=True)

    def submit(self, group: str, message: dict) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (group, message))


_publisher: _Publisher | None = None
_publisher_lock = threading.Lock()


def _publisher_for(layer) -> _Publisher:
    global _publisher
    with _publisher_lock:
        if _publisher is None or _publisher.layer is not layer:
            _publisher = _Publisher(layer)
        return _publisher


def _send(group: str, event: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "studio.event", "event": event}
    if isinstance(layer, InMemoryChannelLayer):
        if not layer.groups.get(group):
            return  # nobody in this process is listening to this agent
        try:
            async_to_sync(layer.group_send)(group, message)
        except Exception:
            log.warning("could not publish %s to %s", event.get("type"), group, exc_info=True)
        return
    _publisher_for(layer).submit(group, message)


def publish_on_commit(agent_id: int, event: dict) -> None:
    """Send `event` to the agent's listeners after the current transaction
    commits (at once when there is none)."""
    transaction.on_commit(lambda: _send(agent_group(agent_id), event))


def publish_game_event_on_commit(game_id: int, event: dict) -> None:
    transaction.on_commit(lambda: _send(game_group(game_id), event))
