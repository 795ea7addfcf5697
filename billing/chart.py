"""The Billing page's spend chart: the last CHART_DAYS days' spend per day,
stacked by kind, laid out as the rectangles and labels of an SVG."""

from datetime import datetime, time, timedelta
from decimal import ROUND_CEILING, Decimal

from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from .models import CostKind, CostLine
from .money import credits_shown

CHART_DAYS = 30

KIND_ORDER = [CostKind.MODEL, CostKind.MEMORY_ACCESS, CostKind.COMPACTION]
# The chart's geometry. Across, positions are percentages of the plot's
# width (so the SVG fills its card and its text keeps its size); down,
# pixels. The y axis labels sit in the plot's left padding (CSS).
PLOT_TOP, PLOT_HEIGHT, LABEL_ROOM = 10, 200, 26
BAR_SHARE = 0.64  # of each day's slot


def nice_step(top: Decimal, ticks: int = 4) -> Decimal:
    """The round step (1, 2, 2.5 or 5 × a power of ten) that covers `top`
    in about `ticks` steps."""
    raw = top / ticks
    magnitude = Decimal(1).scaleb(raw.adjusted())
    for factor in ("1", "2", "2.5", "5", "10"):
        step = Decimal(factor) * magnitude
        if raw <= step:
            return step
    return 10 * magnitude


def daily_spend(game, days: list) -> dict:
    """{(day, kind): credits} over `days` (UTC calendar days)."""
    since = timezone.make_aware(datetime.combine(days[0], time.min), timezone.get_current_timezone())
    rows = (
        CostLine.objects.filter(game=game, created_at__gte=since)
        .annotate(day=TruncDate("created_at"))
        .values_list("day", "kind")
        .annotate(total=Sum("amount"))
    )
    return {(day, kind): total for day, kind, total in rows}


def spend_chart(game, today) -> dict:
    """The last CHART_DAYS days' spend per day, stacked by kind, laid out
    as the rectangles and labels of an SVG chart."""
    days = [today - timedelta(days=CHART_DAYS - 1 - i) for i in range(CHART_DAYS)]
    spent = daily_spend(game, days)
    totals = [sum((spent.get((day, kind), Decimal(0)) for kind in KIND_ORDER), Decimal(0)) for day in days]
    grand_total = sum(totals, Decimal(0))
    chart = {
        "kinds": [
            {
                "kind": kind,
                "label": CostKind(kind).label,
                "total": credits_shown(sum((spent.get((day, kind), 0) for day in days), Decimal(0))),
            }
            for kind in KIND_ORDER
        ],
        "total": credits_shown(grand_total),
        "has_spend": grand_total > 0,
    }
    if not chart["has_spend"]:
        return chart
    step = nice_step(max(totals))
    # The first multiple of step at or above the busiest day (a Decimal's
    # `//` truncates toward zero, so -(-a // b) is no ceiling).
    top = step * (max(totals) / step).to_integral_value(rounding=ROUND_CEILING)
    base = PLOT_TOP + PLOT_HEIGHT
    scale = PLOT_HEIGHT / float(top)
    places = max(0, -step.normalize().as_tuple().exponent)
    slot = 100 / CHART_DAYS
    busiest = max(range(CHART_DAYS), key=lambda i: totals[i])
    chart.update(
        height=base + LABEL_ROOM,
        base=base,
        plot_top=PLOT_TOP,
        plot_height=PLOT_HEIGHT,
        middle=PLOT_TOP + PLOT_HEIGHT / 2,
        label_y=base + LABEL_ROOM - 8,
        slot=f"{slot:.3f}%",
        ticks=[
            {"y": round(base - float(step * i) * scale, 1), "label": f"{step * i:.{places}f}"}
            for i in range(int(top / step) + 1)
        ],
        description=(
            f"{chart['total']} credits spent over the last {CHART_DAYS} days; the most on "
            f"{days[busiest]:%b} {days[busiest].day} ({credits_shown(totals[busiest])})."
        ),
    )
    chart["bars"] = [
        _chart_bar(day, index, spent, totals[index], scale=scale, base=base, slot=slot, today=today)
        for index, day in enumerate(days)
    ]
    return chart


def _chart_bar(day, index, spent, total, *, scale, base, slot, today) -> dict:
    y, segments = base, []
    for kind in KIND_ORDER:
        amount = spent.get((day, kind))
        if amount:
            height = max(float(amount) * scale, 1)  # a day with any spend shows
            y -= height
            segments.append({"kind": kind, "y": round(y, 2), "height": round(height, 2)})
    detail = ", ".join(
        f"{CostKind(k).label} {credits_shown(spent[(day, k)])}" for k in KIND_ORDER if spent.get((day, k))
    )
    is_labelled = (CHART_DAYS - 1 - index) % 7 == 0  # every week, counting back from today
    return {
        "slot_x": f"{slot * index:.3f}%",
        "x": f"{slot * (index + (1 - BAR_SHARE) / 2):.3f}%",
        "width": f"{slot * BAR_SHARE:.3f}%",
        "center": f"{slot * (index + 0.5):.3f}%",
        "segments": segments,
        "title": f"{day:%a %b} {day.day}: "
        + (f"{credits_shown(total)} credits ({detail})" if total else "no spend"),
        "label": ("Today" if day == today else f"{day:%b} {day.day}") if is_labelled else "",
    }
