"""Sends refused for money leave a trace: each is counted per agent, cause
and day (`Refusal`), listed with its cause on the game's overview, and the
first after a quiet spell — the start of the game's refusals — is an alert
(`budget.refused`, billing/alerts.py) to the game's webhook and e-mail.

A refusal is recorded after the send's transaction has rolled back (the
refusal undid it), by the turn slot (`agents.sending.turn_slot.turn_enqueue`).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from studio.errors import PaymentRequired

from . import alerts, ledger
from .models import Account, Refusal, RefusalCause

# Refusals after this long without one start the game's refusals again.
QUIET = timedelta(hours=1)
# What the overview lists: the last week's, the newest (agent, cause) first.
RECENT = timedelta(days=7)
RECENT_SHOWN = 10


def refusal_record(*, game_id: int, agent_name: str, refusal: PaymentRequired) -> None:
    """Count `refusal` (a send refused for money) and, when it starts the
    game's refusals, raise the alert. Its own short transaction."""
    cause = getattr(refusal, "cause", None) or RefusalCause.COMPACTION_UNPAID
    hold = getattr(refusal, "hold", Decimal(0))
    left = getattr(refusal, "left", Decimal(0))
    now = timezone.now()
    key = {"game_id": game_id, "day": now.date(), "agent_name": agent_name, "cause": cause}
    last = {"last_at": now, "hold": hold, "left": left, "message": refusal.message}
    with transaction.atomic():
        if not _count(key, last):
            try:
                with transaction.atomic():
                    Refusal.objects.create(**key, **last, first_at=now)
            except IntegrityError:  # another refusal made the row first
                _count(key, last)
        if _refusals_start(game_id, now):
            alerts.alert_raise(
                game_id=game_id,
                event="budget.refused",
                data={
                    "agent": agent_name or None,
                    "code": refusal.code,
                    "cause": str(cause),
                    "hold": ledger.credits_text(hold),
                    "left": ledger.credits_text(left),
                    "message": refusal.message,
                },
            )


def _count(key: dict, last: dict) -> int:
    return Refusal.objects.filter(**key).update(count=F("count") + 1, **last)


def _refusals_start(game_id: int, now: datetime) -> bool:
    """Whether this refusal starts the game's refusals: none for QUIET, or
    none since its budget last changed. Two refusals at once start them
    once (the conditional update)."""
    quiet = Q(refused_at__isnull=True) | Q(refused_at__lt=now - QUIET)
    if Account.objects.filter(quiet, game_id=game_id).update(refused_at=now):
        return True
    Account.objects.filter(game_id=game_id).update(refused_at=now)
    return False


@dataclass(frozen=True)
class RecentRefusal:
    """Refusals of one agent for one cause lately: how many, the first and
    last, and the last one's words."""

    agent: str
    cause: str
    count: int
    first_at: datetime
    last_at: datetime
    message: str

    @property
    def cause_label(self) -> str:
        return RefusalCause(self.cause).label


@dataclass(frozen=True)
class RecentRefusals:
    total: int
    rows: list[RecentRefusal]


def refusals_recent(*, game_id: int, now: datetime | None = None) -> RecentRefusals:
    """The game's refusals of the last RECENT: counted in all, and by agent
    and cause, the newest first (RECENT_SHOWN of them). One statement over
    at most a row per agent, cause and day."""
    since = (now or timezone.now()) - RECENT
    grouped: dict[tuple, RecentRefusal] = {}
    total = 0
    for row in Refusal.objects.filter(game_id=game_id, last_at__gte=since).order_by("-last_at"):
        total += row.count
        key = (row.agent_name, row.cause)
        seen = grouped.get(key)
        if seen is None:
            grouped[key] = RecentRefusal(
                row.agent_name, row.cause, row.count, row.first_at, row.last_at, row.message
            )
        else:  # an earlier day's: the newest row keeps its words
            grouped[key] = RecentRefusal(
                seen.agent, seen.cause, seen.count + row.count, row.first_at, seen.last_at, seen.message
            )
    return RecentRefusals(total=total, rows=list(grouped.values())[:RECENT_SHOWN])
