"""Live events: small JSON dicts sent to one channel-layer group per agent,
only once the change they report is committed."""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def agent_group(agent_id: int) -> str:
    return f"agent.{agent_id}"


def _send(group: str, event: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, {"type": "studio.event", "event": event})
    except Exception:  # a lost event must never undo or fail a committed change
        log.warning("could not publish %s to %s", event.get("type"), group, exc_info=True)


def publish_on_commit(agent_id: int, event: dict) -> None:
    """Send `event` to the agent's listeners after the current transaction
    commits (at once when there is none)."""
    transaction.on_commit(lambda: _send(agent_group(agent_id), event))
