"""A game's budget at a glance, with foresight: whether it can fund its
agents' sends now (`funding`), how fast it spends (the spend rate), when
its sends stop at that rate (the runway), and its state — for every game
card and list, the Billing page, the overview, the admin and the API.

The state is one of three, worst first:

- `refused` (red): some agent's next send is refused now, for want of
  credits or of cap room;
- `low` (amber): below its low-balance alert, or past 80% of its monthly
  cap — what `budget.low` announces;
- `ok`.

The games list puts the most urgent first: refused, then low, then the
shortest runway.
"""

import calendar
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cached_property

from django.utils import timezone

from studio.models import Game

from . import ledger
from .funding import Funding, game_fundings
from .models import Account
from .selectors import SpendRate, spend_rates

OK, LOW, REFUSED = "ok", "low", "refused"
STATE_LABELS = {OK: "OK", LOW: "Low", REFUSED: "Refused"}
URGENCY = {REFUSED: 0, LOW: 1, OK: 2}
DAY = Decimal(86400)


@dataclass(frozen=True)
class Runway:
    """When sends stop at the spend rate: the balance runs out (`balance`)
    or the monthly cap is reached (`cap`)."""

    at: datetime
    days: Decimal
    by: str  # "balance" or "cap"


@dataclass(frozen=True)
class Budget:
    funding: Funding
    rate: SpendRate
    low_balance_alert: Decimal | None
    now: datetime

    @property
    def game(self) -> Game:
        return self.funding.game

    @property
    def room(self) -> ledger.Room:
        return self.funding.room

    @property
    def state(self) -> str:
        if self.funding.is_refused:
            return REFUSED
        room, alert = self.room, self.low_balance_alert
        below_alert = alert is not None and room.balance < alert
        past_cap_share = bool(room.cap) and room.month_spent >= room.cap * ledger.LOW_SHARE
        return LOW if below_alert or past_cap_share else OK

    @property
    def state_label(self) -> str:
        return STATE_LABELS[self.state]

    @property
    def state_words(self) -> str:
        """Why the state is what it is, in short (for a badge's title and the admin)."""
        if self.state == REFUSED:
            return self.funding.headline + "."
        if self.state == LOW:
            alert = self.low_balance_alert
            if alert is not None and self.room.balance < alert:
                return f"Below its low-balance alert of {ledger.credits_shown(alert)} credits."
            return f"Past {ledger.LOW_SHARE:.0%} of its monthly cap of {ledger.credits_shown(self.room.cap)}."
        return "Sends can be funded, above any alert."

    @cached_property
    def runway(self) -> Runway | None:
        """When sends stop at `rate.per_day`: the balance less what is held
        runs out, or the monthly cap is reached — this month, or, when the
        cap resets first, next month. None when nothing was spent lately."""
        per_day = self.rate.per_day
        if per_day <= 0:
            return None
        room = self.room
        stops = [(self._after(max(room.available, 0) / per_day), "balance")]
        if room.cap is not None:
            month_ends = _month_after(self.now)
            this_month = self._after(max(room.cap_left, 0) / per_day)
            if this_month < month_ends:
                stops.append((this_month, "cap"))
            elif room.cap / per_day < calendar.monthrange(month_ends.year, month_ends.month)[1]:
                stops.append((month_ends + timedelta(seconds=float(room.cap / per_day * DAY)), "cap"))
        at, by = min(stops)
        return Runway(at=at, days=Decimal((at - self.now).total_seconds()) / DAY, by=by)

    def _after(self, days: Decimal) -> datetime:
        # A rate of a few millionths a day puts the end past any date there is.
        return self.now + timedelta(seconds=float(min(days, Decimal(3_650_000)) * DAY))

    @property
    def runway_words(self) -> str:
        """ "At this rate, sends stop in about 12 days (the balance runs out)"."""
        runway, state = self.runway, self.funding.state
        if state == "none":
            return "Sends are refused now."
        if runway is None:
            return "Nothing spent in the last 7 days."
        why = "the balance runs out" if runway.by == "balance" else "the monthly cap is reached"
        if state == "some":
            return f"Some agents’ sends are refused now; at this rate the rest stop {_when(runway.days)} ({why})."
        return f"At this rate, sends stop {_when(runway.days)} ({why})."

    @property
    def urgency(self) -> tuple:
        runway = self.runway
        return (URGENCY[self.state], runway.days if runway else Decimal("Infinity"), self.game.slug)

    def wire(self) -> dict:
        """What `GET /billing` adds: the spend rate and the runway."""
        runway = self.runway
        return {
            "spendRate": self.rate.wire(),
            "runsOutAt": runway.at.isoformat() if runway else None,
            "runwayDays": float(runway.days.quantize(Decimal("0.1"))) if runway else None,
            "state": self.state,
        }


def _month_after(now: datetime) -> datetime:
    """The start of the next calendar month (UTC), when the cap resets."""
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return now.replace(year=year, month=month, day=1, hour=0, minute=0, second=0, microsecond=0)


def _when(days: Decimal) -> str:
    if days <= 0:
        return "now"
    if days < 1:
        return "within a day"
    if days > 365:
        return "in more than a year"
    whole = round(days)
    return f"in about {whole} day{'' if whole == 1 else 's'}"


def game_budgets(games, *, is_operator: bool = False, now: datetime | None = None) -> list[Budget]:
    """The budgets of `games`, the most urgent first, in a fixed number of
    statements whatever their number (`game_fundings`, the accounts' alerts,
    one aggregate for the spend rates)."""
    games = list(games)
    now = now or timezone.now()
    fundings = game_fundings(games, is_operator=is_operator, now=now)
    alerts = dict(Account.objects.filter(game__in=games).values_list("game_id", "low_balance_alert"))
    rates = spend_rates([game.pk for game in games], now=now)
    budgets = [
        Budget(
            funding=fundings[game.pk],
            rate=rates.get(game.pk, SpendRate()),
            low_balance_alert=alerts.get(game.pk),
            now=now,
        )
        for game in games
    ]
    return sorted(budgets, key=lambda budget: budget.urgency)


def game_budget(game: Game, *, is_operator: bool = False, now: datetime | None = None) -> Budget:
    return game_budgets([game], is_operator=is_operator, now=now)[0]
