"""The Billing page: the balance and its limits, spend over time, cost lines
with each turn's breakdown, and adjustments — which only staff users (the
studio's operators) make; the game's admins set or lower its cap and set
its low-balance alert.

Reads go through `BillingPage`, whose parts are computed when a template
first touches them (a fragment refetch runs only its own queries). Writes
call the ledger; a form posted by studio.js gets JSON back, a plain form
post a redirect (or the page again with its errors).
"""

import csv
from datetime import timedelta
from decimal import Decimal
from functools import cached_property

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from agents.models import COPY_MARK, Agent, Replay
from studio.errors import DomainError, error_body
from studio.http.params import uuid_of
from studio.pages.helpers import meter, time_ago
from studio.pages.shell import form_errors_json, member_access, render_page, wants_json

from . import alerts, ledger, selectors
from .budgets import Budget, game_budget
from .chart import CHART_DAYS, spend_chart
from .forms import AdjustmentForm, AlertForm, AlertPlacesForm, LimitsForm
from .funding import Funding
from .ledger import SHORT_OF_CAP, SHORT_OF_CREDITS, credits_shown
from .models import Adjustment, AlertSettings, CostKind, CostLine, ModelPrice

LINES_PER_PAGE = 25
ADJUSTMENTS_PER_PAGE = 10


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
        cap = summary["monthlyCap"]
        month_meter = meter(summary["monthSpent"], cap) if cap else None
        short_of = {send.short_of for send in self.funding.refused}
        if month_meter and SHORT_OF_CAP in short_of:
            month_meter["state"] = "over"  # whatever its share: what it leaves funds some send no more
        return {
            "raw": raw,
            "amounts": summary,
            "is_negative": summary["balance"] < 0,
            "month_meter": month_meter,
            "month": f"{self.now:%B %Y}",
            "cap_left": max(self.funding.room.cap_left, 0) if cap is not None else None,
            # Which agents' sends what is left funds, where it does not fund every one.
            "credits_words": self.funding.fits_words(SHORT_OF_CREDITS)
            if SHORT_OF_CREDITS in short_of
            else "",
            "cap_words": self.funding.fits_words(SHORT_OF_CAP) if SHORT_OF_CAP in short_of else "",
        }

    @cached_property
    def budget(self) -> Budget:
        return game_budget(self.game, is_operator=is_operator(self.request), now=self.now)

    @cached_property
    def funding(self) -> Funding:
        return self.budget.funding

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
            "total": sum((line.amount for line in lines), Decimal(0)),
        }

    @cached_property
    def adjustments(self):
        adjustments = Adjustment.objects.filter(game=self.game).order_by("-id")
        page = Paginator(adjustments, ADJUSTMENTS_PER_PAGE).get_page(self.request.GET.get("adjustments"))
        page.rows = [{"adjustment": a, "ago": time_ago(a.created_at, self.now)} for a in page.object_list]
        return page

    @cached_property
    def agent_spend(self) -> dict:
        """What each agent spent in the chart's days, by kind, the most first."""
        since = self.now - timedelta(days=CHART_DAYS)
        spends = selectors.spend_by_agent(game=self.game, since=since)
        total = sum((spend.total for spend in spends), Decimal(0))
        return {
            "days": CHART_DAYS,
            "rows": [
                {"spend": spend, "share": round(100 * spend.total / total) if total else 0}
                for spend in spends
            ],
            "total": total,
        }

    @cached_property
    def alerts(self) -> dict:
        """Where the game's alerts go, for its budget owners."""
        alerting = AlertSettings.objects.filter(game=self.game).first()
        secret = alerting.webhook_secret if alerting else ""
        return {
            "webhook_url": alerting.webhook_url if alerting else "",
            "email": alerting.email if alerting else "",
            "secret_hint": f"{secret[: len(alerts.SECRET_PREFIX)]}…{secret[-4:]}" if secret else "",
            "email_on": settings.STUDIO["EMAIL_ALERTS"],
            "recipients": alerts.email_recipients(self.game.pk, alerting),
        }

    @cached_property
    def deliveries(self) -> list[dict]:
        return [
            {"delivery": delivery, "ago": time_ago(delivery.created_at, self.now)}
            for delivery in alerts.deliveries_recent(game=self.game)
        ]

    @cached_property
    def prices(self) -> dict:
        return {
            "memory_access": ledger.fee(ledger.MEMORY_ACCESS),
            "models": [
                {
                    "model": price.model,
                    "input": price.input_per_mtok,
                    "output": price.output_per_mtok,
                    "cached": price.cached_input_per_mtok,
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


# --- where alerts go ----------------------------------------------------------------------


@login_required
@require_POST
def billing_alerts(request, game):
    """The game's alert places: save the webhook URL and e-mail address,
    rotate the webhook's secret, remove the webhook, or send a test
    (`action`). A new secret is shown once, in the answer."""
    access = member_access(request, game)
    if not is_budget_owner(request, access):
        return _refused(request, ONLY_BUDGET_OWNERS)
    action = request.POST.get("action", "save")
    try:
        news = _alerts_act(access.game, action, request.POST)
    except AlertsInvalid as invalid:
        return _failed(request, access, "alerts_form", invalid.form, invalid.refusal)
    except DomainError as refusal:
        if wants_json(request):
            return JsonResponse(error_body(refusal.code, refusal.message), status=refusal.status)
        messages.error(request, refusal.message)
        return redirect("billing-page", access.game.slug)
    return _done(request, access, news)


class AlertsInvalid(Exception):
    def __init__(self, form, refusal: DomainError | None = None):
        self.form, self.refusal = form, refusal


def _alerts_act(game, action: str, data) -> str:
    if action == "rotate":
        return _secret_news(alerts.webhook_secret_rotate(game=game), rotated=True)
    if action == "remove":
        alerts.webhook_remove(game=game)
        return "The webhook is removed: alerts go to it no more."
    if action == "test":
        sent = alerts.alert_test(game=game)
        if not sent:
            return "There is nowhere to send a test to: set a webhook URL (or the studio's e-mail) first."
        return (
            f"A test alert is on its way to {len(sent)} place{'' if len(sent) == 1 else 's'}: see Deliveries."
        )
    form = AlertPlacesForm(data)
    if not form.is_valid():
        raise AlertsInvalid(form)
    alerts.alert_email_set(game=game, email=form.cleaned_data["email"])
    url = form.cleaned_data["webhook_url"]
    if not url:
        alerts.webhook_remove(game=game)
        return "Saved. No webhook is set."
    try:
        secret = alerts.webhook_set(game=game, url=url)
    except DomainError as refusal:
        form.add_error("webhook_url", refusal.message)
        raise AlertsInvalid(form, refusal) from None
    return "Saved." + (" " + _secret_news(secret) if secret else "")


def _secret_news(secret: str, *, rotated: bool = False) -> str:
    what = "The webhook's new signing secret" if rotated else "The webhook's signing secret"
    return f"{what}, shown this once — copy it now: {secret}"


# --- spend by agent, as a file ------------------------------------------------------------------

EXPORT_DAYS_MAX = 3650


@login_required
def billing_agent_spend_csv(request, game):
    """What each agent spent in the last `days` (30; 1 to 3,650), by kind,
    as CSV with the ledger's exact amounts (six places); an agent's
    replays' copies in a row of their own (`replays` true)."""
    access = member_access(request, game)
    days = request.GET.get("days", str(CHART_DAYS))
    if not days.isdigit() or not 1 <= int(days) <= EXPORT_DAYS_MAX:
        return JsonResponse(
            error_body("invalid_request", f"days must be a whole number from 1 to {EXPORT_DAYS_MAX:,}."),
            status=400,
        )
    now = timezone.now()
    since = now - timedelta(days=int(days))
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="{access.game.slug}-spend-by-agent-{now:%Y-%m-%d}-{days}d.csv"'
    )
    writer = csv.writer(response)
    writer.writerow(
        ["agent", "model", "memory_access", "compaction", "total", "lines", "since", "until", "replays"]
    )
    for spend in selectors.spend_by_agent(game=access.game, since=since):
        writer.writerow(
            [
                spend.agent,
                *(
                    ledger.credits_text(amount)
                    for amount in (spend.model, spend.memory_access, spend.compaction)
                ),
                ledger.credits_text(spend.total),
                spend.lines,
                since.isoformat(),
                now.isoformat(),
                "true" if spend.replays else "false",
            ]
        )
    return response


# --- the page ----------------------------------------------------------------------

FRAGMENTS = {
    "summary": "billing/_summary.html",
    "lines": "billing/_lines.html",
    "adjustments": "billing/_adjustments.html",
    "agent_spend": "billing/_agent_spend.html",
    "deliveries": "billing/_deliveries.html",
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
        "alerts_form": AlertPlacesForm(),
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
