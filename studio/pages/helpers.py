"""What every studio page shows the same way: a value against its budget
as a bar (its width, and one rule for when it turns amber or red), and how
long ago something happened."""

from django.utils import timezone
from django.utils.timesince import timesince

# Every bar turns amber from this share of its budget (where the billing
# ledger sends its budget.low warning too) and red once past the whole.
WARN_SHARE = 0.8
# timesince counts whole minutes, so anything younger reads as this.
JUST_NOW_SECONDS = 60


def share(value, budget) -> float:
    """`value` as a percentage of `budget`, for a bar's width (0–100)."""
    if not budget:
        return 0.0
    return round(min(max(float(value) / float(budget) * 100, 0.0), 100.0), 1)


def tone(value, budget) -> str:
    """A bar's colour class: "over" past its budget, "warn" from WARN_SHARE
    of it, else none. A bar without a budget has no colour."""
    if not budget:
        return ""
    ratio = float(value) / float(budget)
    return "over" if ratio > 1 else "warn" if ratio >= WARN_SHARE else ""


def meter(value, budget) -> dict:
    """A value against its budget, for a .meter: texts, width and tone."""
    percent = float(value) / float(budget) * 100 if budget else 0.0
    return {
        "value": value,
        "budget": budget,
        "value_text": f"{value:,}",
        "budget_text": f"{budget:,}",
        "percent": "<0.1" if 0 < percent < 0.1 else f"{percent:.1f}".removesuffix(".0"),
        "width": share(value, budget),
        "state": tone(value, budget),
    }


def time_ago(moment, now=None) -> str:
    """How long ago, in its largest unit ("5 minutes ago"), or "just now"."""
    now = now or timezone.now()
    if (now - moment).total_seconds() < JUST_NOW_SECONDS:
        return "just now"
    return f"{timesince(moment, now, depth=1)} ago"
