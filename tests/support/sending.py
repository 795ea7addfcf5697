"""Sends as the tests make them."""

from agents.models import Agent, Turn
from agents.sending.engine import send


def turn_send(
    *, agent: Agent, content: str, transient: bool = False, idempotency_key: str | None = None
) -> Turn:
    """`send`, for a test that needs only the ended turn."""
    return send(agent=agent, content=content, transient=transient, idempotency_key=idempotency_key).turn
