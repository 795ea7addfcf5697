"""Turns as a process that died leaves them."""

from datetime import timedelta

from django.utils import timezone

from agents.models import Turn, TurnStatus
from billing import ledger


def dead_turn(agent, *, status=TurnStatus.RUNNING) -> Turn:
    """A live turn as a process that died mid-send leaves it: its hold
    taken, its lease lapsed."""
    hold = ledger.hold_estimate(max_tokens=agent.max_tokens, price=ledger.model_price(agent.model))
    ledger.hold_take(game=agent.game, amount=hold)
    return Turn.objects.create(
        agent=agent, status=status, held=hold, lease_until=timezone.now() - timedelta(seconds=5)
    )
