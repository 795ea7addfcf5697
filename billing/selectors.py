"""Reads of the ledger: cost lines and adjustments for the API, a page at a
time (studio.http.lists), in the wire shapes the API answers with; what games
spend lately (the spend rate) and what each agent spent."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Q, Sum

from agents.models import COPY_MARK, Replay
from studio.http.lists import Keyset, Page, each
from studio.models import Game

from . import ledger
from .models import Adjustment, CostLine

LINES = Keyset("lines", order="-id", default_limit=100)
ADJUSTMENTS = Keyset("adjustments", order="-id", default_limit=200)


def _entry_wire(entry: CostLine | Adjustment) -> dict:
    """What every entry of the ledger shows: its id, amount and time."""
    return {
        "id": entry.pk,
        "amount": ledger.credits_text(entry.amount),
        "createdAt": entry.created_at.isoformat(),
    }


def line_wire(line: CostLine) -> dict:
    return {
        **_entry_wire(line),
        "turnId": str(line.turn_id) if line.turn_id else None,
        "agent": line.agent_name or None,
        "kind": line.kind,
        "label": line.label,
        "quantity": line.quantity,
        "detail": line.detail,
    }


def adjustment_wire(adjustment: Adjustment) -> dict:
    return {**_entry_wire(adjustment), "reason": adjustment.reason, "madeBy": adjustment.made_by}


def lines_page(
    *, game: Game, turn=None, agent: str | None = None, kind: str | None = None, after: int | None, limit: int
) -> Page:
    """The game's cost lines, newest first; only a turn's, an agent's or a
    kind's when given."""
    lines = CostLine.objects.filter(game=game)
    for field, value in (("turn_id", turn), ("agent_name", agent), ("kind", kind)):
        if value is not None:
            lines = lines.filter(**{field: value})
    return LINES.page(lines, after=after, limit=limit, wire=each(line_wire))


def adjustments_page(*, game: Game, after: int | None, limit: int) -> Page:
    """The game's budget adjustments, newest first."""
    return ADJUSTMENTS.page(
        Adjustment.objects.filter(game=game), after=after, limit=limit, wire=each(adjustment_wire)
    )


@dataclass(frozen=True)
class SpendRate:
    """What a game spent in the last 24 hours and in the last 7 days."""

    day: Decimal = Decimal(0)
    week: Decimal = Decimal(0)

    @property
    def per_day(self) -> Decimal:
        """The rate foresight goes by: the higher of the last day's spend
        and the last week's daily average, so a burst today shows at once
        and a quiet day does not hide a busy week."""
        return max(self.day, self.week / 7)

    def wire(self) -> dict:
        return {"day": ledger.credits_text(self.day), "week": ledger.credits_text(self.week)}


def spend_rates(game_ids, *, now: datetime) -> dict[int, SpendRate]:
    """Each game's `SpendRate` as of `now`, in one aggregate statement over
    its last week's cost lines (the `billing_line_game_time` index); a game
    that spent nothing is left out."""
    day_ago, week_ago = now - timedelta(days=1), now - timedelta(days=7)
    rows = (
        CostLine.objects.filter(game_id__in=list(game_ids), created_at__gte=week_ago, created_at__lte=now)
        .values("game_id")
        .annotate(day=Sum("amount", filter=Q(created_at__gte=day_ago)), week=Sum("amount"))
        .values_list("game_id", "day", "week")
    )
    return {
        game_id: SpendRate(day=ledger.credits(day or 0), week=ledger.credits(week or 0))
        for game_id, day, week in rows
    }


@dataclass(frozen=True)
class AgentSpend:
    """What one agent's cost lines add up to since a time, by kind; with
    `replays`, what its replays' copies spent instead (one row for them all)."""

    agent: str
    replays: bool = False
    model: Decimal = Decimal(0)
    memory_access: Decimal = Decimal(0)
    compaction: Decimal = Decimal(0)
    lines: int = 0

    @property
    def total(self) -> Decimal:
        return self.model + self.memory_access + self.compaction


def spend_by_agent(*, game: Game, since: datetime | None = None) -> list[AgentSpend]:
    """What each agent spent (since `since`, or in every line kept), by
    kind, in one aggregate statement (and one more naming the agents that
    replays' copies played); the most spent first. Lines of no agent are
    under ""; a copy's are under its agent's replays, never its own name."""
    lines = CostLine.objects.filter(game=game)
    if since is not None:
        lines = lines.filter(created_at__gte=since)
    rows = lines.values_list("agent_name", "kind").annotate(total=Sum("amount"), n=Count("id")).order_by()
    replayed = _replayed_agents(game, {agent for agent, *_ in rows if COPY_MARK in agent})
    by_agent: dict[tuple[str, bool], dict] = {}
    for agent, kind, total, count in rows:
        key = (replayed[agent], True) if agent in replayed else (agent, False)
        spent = by_agent.setdefault(key, {"lines": 0})
        spent[kind] = spent.get(kind, Decimal(0)) + ledger.credits(total or 0)
        spent["lines"] += count
    spends = [
        AgentSpend(agent=agent, replays=replays, **fields) for (agent, replays), fields in by_agent.items()
    ]
    return sorted(spends, key=lambda spend: (-spend.total, spend.agent, spend.replays))


def _replayed_agents(game: Game, copies: set[str]) -> dict[str, str]:
    """The agent each of these copies replayed, by the copy's name (the name
    before its mark when the replay is no longer kept)."""
    if not copies:
        return {}
    kept = dict(
        Replay.objects.filter(agent__game=game, replay_agent_name__in=copies).values_list(
            "replay_agent_name", "agent__name"
        )
    )
    return {copy: kept.get(copy, copy.split(COPY_MARK)[0]) for copy in copies}
