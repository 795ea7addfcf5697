"""The Billing page: the balance and its limits, spend over time, cost lines
with each turn's breakdown, and adjustments — which only staff users (the
studio's operators) make; the game's admins set or lower its cap and set
its low-balance alert.

Reads go through `BillingPage`, whose parts are computed when a template
first touches them (a fragment refetch runs only its own queries). Writes
call the ledger; a form posted by studio.js gets JSON back, a plain form
post a redirect (or the page again with its errors).
"""

from datetime import datetime, time, timedelta
from decimal import Decimal
from functools import cached_property

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.http import JsonResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from agents.models import COPY_MARK, Agent, Replay
from studio.errors import DomainError, error_body
from studio.page_helpers import meter, time_ago
from studio.pages import form_errors_json, member_access, render_page, wants_json
from studio.params import uuid_of

from . import ledger
from .forms import AdjustmentForm, AlertForm, LimitsForm
from .funding import Funding, game_funding
from .ledger import SHORT_OF_CAP, SHORT_OF_CREDITS, credits_shown
from .models import Adjustment, CostKind, CostLine, ModelPrice

LINES_PER_PAGE = 25
ADJUSTMENTS_PER_PAGE = 10
CHART_DAYS = 30


# --- spend over time ---------------------------------------------------------------

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
    top = step * -(-max(totals) // step)  # the first multiple of step at or above the busiest day
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


# --- cost lines --------------------------------------------------------------------


def line_quantity(line: CostLine) -> str:
    if line.kind == CostKind.MEMORY_ACCESS:
        return f"{line.quantity:,} call{'' if line.quantity == 1 else 's'}"
    return f"{line.quantity:,} tokens"


def line_counted(line: CostLine) -> str:
    """What the line's quantity is made of, from its detail."""
    detail = line.detail or {}
    if line.kind == CostKind.MEMORY_ACCESS:
        return f"{line.quantity:,} memory tool call{'' if line.quantity == 1 else 's'}, errors included"
    parts = [f"{detail.get('inputTokens', 0):,} tokens in"]
    if detail.get("cachedInputTokens"):
        parts.append(f"{detail['cachedInputTokens']:,} of them cached")
    parts.append(f"{detail.get('outputTokens', 0):,} out")
    calls = detail.get("calls")
    prefix = f"{calls} model call{'' if calls == 1 else 's'}: " if calls else ""
    return prefix + ", ".join(parts)


def line_price(line: CostLine) -> str:
    """The prices the line was charged at, as kept in its detail."""
    detail = line.detail or {}
    if line.kind == CostKind.MEMORY_ACCESS:
        return f"{credits_shown(detail['feeEach'])} per call" if "feeEach" in detail else "—"
    if "inputPerMTok" not in detail:
        return "—"
    prices = [f"{credits_shown(detail['inputPerMTok'])} in"]
    if detail.get("cachedInputPerMTok") and detail.get("cachedInputTokens"):
        prices.append(f"{credits_shown(detail['cachedInputPerMTok'])} cached")
    prices.append(f"{credits_shown(detail['outputPerMTok'])} out")
    return f"{detail.get('model', '')}: " + " · ".join(prices) + " per million tokens"


class LineFilters(forms.Form):
    agent = forms.CharField(required=False)
    turn = forms.UUIDField(
        required=False, error_messages={"invalid": "That is not a turn id (a UUID, as in a turn’s costs)."}
    )
    kind = forms.ChoiceField(required=False, choices=[("", "Any kind"), *CostKind.choices])

    def clean_turn(self):
        # Django's UUIDField reads '{…}', 'urn:uuid:…' and other scripts' digits too.
        written = self.data.get("turn", "").strip()
        if written and uuid_of(written) is None:
            raise forms.ValidationError(self.fields["turn"].error_messages["invalid"])
        return self.cleaned_data["turn"]


class BillingPage:
    """What the Billing page shows about one game, read when first used."""

    def __init__(self, request, access):
        self.request = request
        self.game = access.game
        self.now = timezone.now()
        self.filters = LineFilters(request.GET)
        self.filters.is_valid()

    @cached_property
    def summary(self) -> dict:
        raw = ledger.account_summary(self.game)
        summary = {key: Decimal(value) if value is not None else None for key, value in raw.items()}
        shown = {key: credits_shown(value) if value is not None else None for key, value in summary.items()}
        cap = summary["monthlyCap"]
        month_meter = meter(summary["monthSpent"], cap) if cap else None
        short_of = {send.short_of for send in self.funding.refused}
        if month_meter and SHORT_OF_CAP in short_of:
            month_meter["state"] = "over"  # whatever its share: what it leaves funds no send
        return {
            "raw": raw,
            "shown": shown,
            "is_negative": summary["balance"] < 0,
            "month_meter": month_meter,
            "month": f"{self.now:%B %Y}",
            "cap_left": credits_shown(max(self.funding.room.cap_left, 0)) if cap is not None else None,
            "short_of_credits": SHORT_OF_CREDITS in short_of,
            "short_of_cap": SHORT_OF_CAP in short_of,
        }

    @cached_property
    def funding(self) -> Funding:
        return game_funding(self.game, is_operator=is_operator(self.request))

    @cached_property
    def chart(self) -> dict:
        return spend_chart(self.game, timezone.localdate(self.now))

    @cached_property
    def agent_names(self) -> list[str]:
        """The game's agents, and the deleted ones its lines name — not
        replays' copies: their lines show as their replay's."""
        charged = (
            CostLine.objects.filter(game=self.game)
            .exclude(agent_name="")
            .values_list("agent_name", flat=True)
        )
        # A copy's name holds a character no definition's may (`replays.copy_name`).
        charged = charged.exclude(agent_name__contains=COPY_MARK)
        defined = Agent.objects.filter(game=self.game, replay_of=None).values_list("name", flat=True)
        return sorted(set(charged.distinct()) | set(defined))

    def replay_copies(self, names) -> dict:
        """The replays whose copies have these names, by the copy's name (the
        replay's `agent`: the agent it replays), whose pages show their costs."""
        copies = [name for name in set(names) if COPY_MARK in name]
        if not copies:
            return {}
        replays = Replay.objects.filter(agent__game=self.game, replay_agent_name__in=copies)
        return {replay.replay_agent_name: replay for replay in replays.select_related("agent")}

    @cached_property
    def live_agents(self) -> set[str]:
        return set(Agent.objects.filter(game=self.game).values_list("name", flat=True))

    @property
    def turn(self):
        return self.filters.cleaned_data.get("turn") if self.filters.is_valid() else None

    @property
    def is_filtered(self) -> bool:
        return any(self.request.GET.get(key) for key in ("agent", "turn", "kind"))

    def _filtered(self, lines):
        data = self.filters.cleaned_data if self.filters.is_valid() else {}
        if data.get("agent"):
            lines = lines.filter(agent_name=data["agent"])
        if data.get("kind"):
            lines = lines.filter(kind=data["kind"])
        if data.get("turn"):
            lines = lines.filter(turn_id=data["turn"])
        return lines

    @cached_property
    def lines(self):
        """A page of the matching lines, newest first (none when a filter is
        not valid: the form says why)."""
        lines = CostLine.objects.filter(game=self.game).order_by("-id")
        lines = self._filtered(lines) if self.filters.is_valid() else lines.none()
        page = Paginator(lines, LINES_PER_PAGE).get_page(self.request.GET.get("page"))
        copies = self.replay_copies(line.agent_name for line in page.object_list)
        page.rows = [self._line_row(line, copies.get(line.agent_name)) for line in page.object_list]
        return page

    def _line_row(self, line: CostLine, replay) -> dict:
        """A line, and `replay` when it is a replay's copy's (None: an agent's)."""
        return {
            "line": line,
            "ago": time_ago(line.created_at, self.now),
            "quantity": line_quantity(line),
            "replay": replay,
        }

    @cached_property
    def breakdown(self) -> dict | None:
        """The turn's lines with what they counted and the prices charged:
        Model, Memory access, Compaction."""
        turn = self.turn
        if turn is None:
            return None
        data = self.filters.cleaned_data
        lines = [
            line
            for line in ledger.turn_lines(turn)
            if line.game_id == self.game.pk  # turn_lines does not scope to a game
            and data.get("kind") in ("", None, line.kind)
            and data.get("agent") in ("", None, line.agent_name)
        ]
        agent = lines[0].agent_name if lines else ""
        return {
            "turn": turn,
            "is_partial": bool(data.get("kind") or data.get("agent")),
            "agent": agent,
            "agent_exists": agent in self.live_agents,
            "at": min((line.created_at for line in lines), default=None),
            "rows": [
                {
                    "line": line,
                    "counted": line_counted(line),
                    "price": line_price(line),
                    "quantity": line_quantity(line),
                }
                for line in lines
            ],
            "total": credits_shown(sum((line.amount for line in lines), Decimal(0))),
        }

    @cached_property
    def adjustments(self):
        adjustments = Adjustment.objects.filter(game=self.game).order_by("-id")
        page = Paginator(adjustments, ADJUSTMENTS_PER_PAGE).get_page(self.request.GET.get("adjustments"))
        page.rows = [
            {
                "adjustment": a,
                "ago": time_ago(a.created_at, self.now),
                "amount": credits_shown(a.amount, signed=True),
            }
            for a in page.object_list
        ]
        return page

    @cached_property
    def prices(self) -> dict:
        return {
            "memory_access": credits_shown(ledger.fee(ledger.MEMORY_ACCESS)),
            "models": [
                {
                    "model": price.model,
                    "input": credits_shown(price.input_per_mtok),
                    "output": credits_shown(price.output_per_mtok),
                    "cached": credits_shown(price.cached_input_per_mtok),
                }
                for price in sorted(ModelPrice.objects.all(), key=lambda p: (p.model == "*", p.model))
            ],
        }


# --- the forms that move and bound money ------------------------------------------------------
#
# Staff users (the studio's operators) adjust credits and may set any
# limit; a game's admins set or lower its cap and set its low-balance
# alert; everyone else reads.

ONLY_OPERATORS_ADJUST = (
    "Only the studio's operators (its staff users) add or take away credits. Ask them for a top-up."
)
ONLY_BUDGET_OWNERS = "Only the game's admins and the studio's operators set its limits."


def is_operator(request) -> bool:
    return request.user.is_staff


def is_budget_owner(request, access) -> bool:
    return access.is_admin or is_operator(request)


def _refused(request, message: str):
    """A 403: in the studio's error shape to studio.js, Django's page to a plain form post."""
    if wants_json(request):
        return JsonResponse(error_body("forbidden", message), status=403)
    raise PermissionDenied(message)


def _done(request, access, message: str):
    if wants_json(request):
        return JsonResponse({"message": message, **ledger.account_summary(access.game)})
    messages.success(request, message)
    return redirect("billing-page", access.game.slug)


def _failed(request, access, form_name: str, form, refusal: DomainError | None = None):
    """The form's errors: 400 (or the ledger's refusal, with its status and code)."""
    status, code = (refusal.status, refusal.code) if refusal else (400, "invalid_request")
    if wants_json(request):
        return form_errors_json(form, code, status)
    return _render(request, access, {form_name: form}, status=status)


@login_required
@require_POST
def billing_adjust(request, game):
    access = member_access(request, game)
    if not is_operator(request):
        return _refused(request, ONLY_OPERATORS_ADJUST)
    form = AdjustmentForm(request.POST, balance=ledger.balance(access.game))
    if not form.is_valid():
        return _failed(request, access, "adjustment_form", form)
    adjustment = ledger.adjustment_post(
        game=access.game,
        amount=form.cleaned_data["amount"],
        reason=form.cleaned_data["reason"].strip(),
        made_by=request.user.get_username(),
    )
    balance = credits_shown(ledger.balance(access.game))
    return _done(
        request,
        access,
        f"Adjusted by {credits_shown(adjustment.amount, signed=True)} credits. The balance is now {balance}.",
    )


def _limit_set(request, game, form_class, *, form_name: str, button: str, news):
    """Set or clear (its form's `button` says which) one limit; `news`
    says what the new value means."""
    access = member_access(request, game)
    if not is_budget_owner(request, access):
        return _refused(request, ONLY_BUDGET_OWNERS)
    form = form_class(request.POST, clearing=request.POST.get(button) == "clear")
    if not form.is_valid():
        return _failed(request, access, form_name, form)
    try:
        ledger.limits_set(game=access.game, **{form.name: form.value()}, by_staff=is_operator(request))
    except DomainError as refusal:  # a cap only staff may raise or remove
        form.add_error(None, refusal.message)
        return _failed(request, access, form_name, form, refusal)
    return _done(request, access, news(form.value()))


def _cap_news(cap) -> str:
    return (
        "Removed the monthly cap." if cap is None else f"The monthly cap is now {credits_shown(cap)} credits."
    )


def _alert_news(alert) -> str:
    if alert is None:
        return "The low-balance alert is off."
    return (
        f"The low-balance alert is now {credits_shown(alert)} credits: budget.low is sent when a charge "
        "takes the balance below it."
    )


@login_required
@require_POST
def billing_limits(request, game):
    return _limit_set(request, game, LimitsForm, form_name="limits_form", button="cap", news=_cap_news)


@login_required
@require_POST
def billing_alert(request, game):
    return _limit_set(request, game, AlertForm, form_name="alert_form", button="alert", news=_alert_news)


# --- the page ----------------------------------------------------------------------

FRAGMENTS = {
    "summary": "billing/_summary.html",
    "lines": "billing/_lines.html",
    "adjustments": "billing/_adjustments.html",
}


def _render(request, access, forms_in_play: dict | None = None, status: int = 200):
    context = {
        "game": access.game,
        "section": "billing",
        "access": access,
        "view": BillingPage(request, access),
        "adjustment_form": AdjustmentForm(),
        "limits_form": LimitsForm(),
        "alert_form": AlertForm(),
        "is_operator": is_operator(request),
        "is_budget_owner": is_budget_owner(request, access),
        **(forms_in_play or {}),
    }
    response = render_page(request, "billing/page.html", context, FRAGMENTS)
    response.status_code = status
    return response


@login_required
def billing_page(request, game):
    return _render(request, member_access(request, game))
