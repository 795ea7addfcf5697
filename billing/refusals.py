"""Sends refused for money: what a refusal says, and the trace it leaves.

A refusal names its real cause (`RefusalCause`) — the ledger's `Room`
decides it when a hold does not fit (`ledger.hold_take`) — in a sentence
that fits every reader, and advice that fits the one who reads it.

Each is counted per agent, cause and day (`Refusal`), listed with its cause
on the game's overview, and the first after a quiet spell — the start of
the game's refusals — is an alert (`budget.refused`, billing/alerts.py) to
the game's webhook and e-mail. A refusal is recorded after the send's
transaction has rolled back (the refusal undid it), by the turn slot
(`agents.sending.turn_slot.turn_enqueue`).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from studio.errors import PaymentRequired

from . import alerts
from .models import Account, Refusal, RefusalCause
from .money import credits_apart, credits_shown, credits_text

# Who a refusal sends the caller to: no API key moves credits or raises a cap.
OPERATORS = "The studio's operators (its staff users)"
SHORT_OF_CREDITS, SHORT_OF_CAP = "credits", "cap"
# Why a hold does not fit, the real cause, by what would lift it: the
# balance less every hold is nothing, or less than this hold; the monthly
# cap is reached, or leaves less than this hold. A game refuses a big
# hold while a smaller one still fits, so the cause names which it is.
SHORT_OF = {
    RefusalCause.BALANCE_EXHAUSTED: SHORT_OF_CREDITS,
    RefusalCause.HOLD_OVER_BALANCE: SHORT_OF_CREDITS,
    RefusalCause.CAP_REACHED: SHORT_OF_CAP,
    RefusalCause.HOLD_OVER_CAP: SHORT_OF_CAP,
    RefusalCause.COMPACTION_UNPAID: SHORT_OF_CREDITS,
}


def refusal_said(cause: str, room, *, hold: Decimal, agent: str, game: str, others: bool = True) -> str:
    """A refusal's real cause, in a sentence that fits every reader (what
    to do about it is `refusal_advice`'s, by reader). `others`: say that
    an agent whose sends hold less may still play, when the hold is what
    does not fit (a page that knows which agents can says so itself)."""
    balance, held = credits_shown(room.balance), credits_shown(room.held)
    if cause == RefusalCause.BALANCE_EXHAUSTED:
        holding = f", {held} of it held by running turns" if room.held else ""
        return f"The game '{game}' cannot pay for this send: it has no credits left (balance {balance}{holding})."
    if cause == RefusalCause.CAP_REACHED:
        return (
            f"The game '{game}' has reached its monthly spend cap of {credits_shown(room.cap)} credits "
            f"({credits_shown(room.month_spent)} spent this month, {held} held by running turns)."
        )
    needs, left = credits_apart(hold, room.left_for(cause))
    send = f"A send to {agent}" if agent else "This send"
    smaller = (
        "; an agent whose sends hold less (a smaller maxTokens or a cheaper model) may still play"
        if others
        else ""
    )
    if cause == RefusalCause.HOLD_OVER_BALANCE:
        return (
            f"{send} holds up to {needs} credits (its model call's worst case), more than the {left} the game "
            f"'{game}' has available (balance {balance}, {held} held by running turns){smaller}."
        )
    return (
        f"{send} holds up to {needs} credits (its model call's worst case), more than the {left} that the "
        f"monthly cap of {credits_shown(room.cap)} leaves the game '{game}' this month "
        f"({credits_shown(room.month_spent)} spent, {held} held by running turns){smaller}."
    )


def refusal_advice(cause: str, *, is_operator: bool) -> str:
    """What the reader of a refusal can do: an operator (a staff user) is
    told where to lift it; anyone else, whom to ask."""
    if SHORT_OF[cause] == SHORT_OF_CAP:
        if is_operator:
            return "You can raise the monthly cap on the game's Billing page."
        return f"Only {OPERATORS[0].lower()}{OPERATORS[1:]} raise the monthly cap: ask them."
    if is_operator:
        return "You can add credits on the game's Billing page (Adjust the budget)."
    return f"{OPERATORS} add credits: ask them for a top-up."


class MoneyRefused(PaymentRequired):
    """A send refused for want of credits or cap room, with its real cause
    (`RefusalCause`): 402 `budget_exhausted` for the balance,
    `spend_cap_reached` for the cap. `message` is for an API key's reader;
    `message_for` fits a page's reader."""

    def __init__(
        self, cause: str, *, said: str, agent: str = "", hold: Decimal = Decimal(0), left=Decimal(0)
    ):
        self.cause, self.said, self.agent, self.hold, self.left = cause, said, agent, hold, left
        code = "spend_cap_reached" if SHORT_OF[cause] == SHORT_OF_CAP else "budget_exhausted"
        super().__init__(self.message_for(is_operator=False), code=code)

    def message_for(self, *, is_operator: bool) -> str:
        return f"{self.said} {refusal_advice(self.cause, is_operator=is_operator)}"


# --- the trace ------------------------------------------------------------------------------

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
                    "hold": credits_text(hold),
                    "left": credits_text(left),
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
