"""Reads of the ledger for the API: cost lines and adjustments, a page at a
time (studio.lists), in the wire shapes the API answers with."""

from studio.lists import Keyset, Page, each
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
