"""Credits over the API: the balance and prices, cost lines, adjustments
(read only: no API key moves credits), and the limits a game's admin keys
set."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from studio.auth.authentication import HasGameKey, IsAdminKey
from studio.errors import DomainError
from studio.http.api_fields import (
    StrictSerializer,
    UnsignedCreditsField,
    query,
    valid,
)
from studio.http.lists import list_out, list_schema
from studio.http.schema import errors

from . import ledger, selectors
from .budgets import game_budget
from .models import CostKind, ModelPrice


class ModelPriceOut(serializers.Serializer):
    inputPerMTok = serializers.CharField()
    outputPerMTok = serializers.CharField()
    cachedInputPerMTok = serializers.CharField()


class PricesOut(serializers.Serializer):
    memoryAccess = serializers.CharField(help_text="Credits per memory tool call, errors included.")
    models = serializers.DictField(
        child=ModelPriceOut(), help_text="Credits per million tokens, by model; '*' prices the rest."
    )


class LimitsOut(serializers.Serializer):
    balance = serializers.CharField()
    held = serializers.CharField(help_text="Reserved by running turns (one model call's worst case each).")
    available = serializers.CharField(help_text="Balance less what is held: what a new send can use.")
    monthlyCap = serializers.CharField(allow_null=True, help_text="The most the game may spend in a month.")
    monthSpent = serializers.CharField(help_text="Spent this calendar month (UTC).")
    lowBalanceAlert = serializers.CharField(
        allow_null=True,
        help_text="When a charge takes the balance below this, the game's agents' streams get `budget.low`.",
    )


class SpendRateOut(serializers.Serializer):
    day = serializers.CharField(help_text="Credits spent in the last 24 hours.")
    week = serializers.CharField(help_text="Credits spent in the last 7 days.")


class BillingOut(LimitsOut):
    prices = PricesOut()
    spendRate = SpendRateOut(help_text="What the game spent lately, from its cost lines.")
    runsOutAt = serializers.DateTimeField(
        allow_null=True,
        help_text="When sends stop at the spend rate (the higher of the last day's spend and the last week's "
        "daily average): the balance less what is held runs out, or the monthly cap is reached. "
        "null when nothing was spent in the last 7 days.",
    )
    runwayDays = serializers.FloatField(
        allow_null=True, help_text="Days from now to `runsOutAt`, to one decimal place; null with it."
    )
    state = serializers.ChoiceField(
        choices=["ok", "low", "refused"],
        help_text="`refused`: some agent's next send is refused now; `low`: below the low-balance alert, or "
        "past 80% of the monthly cap; else `ok`.",
    )


class LedgerEntryOut(serializers.Serializer):
    id = serializers.IntegerField()
    amount = serializers.CharField(help_text="Credits, six decimal places.")
    createdAt = serializers.DateTimeField()


class LineOut(LedgerEntryOut):
    turnId = serializers.UUIDField(allow_null=True)
    agent = serializers.CharField(allow_null=True)
    kind = serializers.ChoiceField(choices=["model", "memory_access", "compaction"])
    label = serializers.CharField()
    quantity = serializers.IntegerField()
    detail = serializers.DictField()


LinesOut = list_out("LinesOut", "lines", LineOut)


class AdjustmentOut(LedgerEntryOut):
    reason = serializers.CharField()
    madeBy = serializers.CharField()


AdjustmentListOut = list_out("AdjustmentListOut", "adjustments", AdjustmentOut)


class BillingView(APIView):
    @extend_schema(
        operation_id="billing_get",
        responses={200: BillingOut, **errors()},
        summary="The game's balance and the price list",
    )
    def get(self, request):
        prices = {
            "memoryAccess": ledger.credits_text(ledger.fee(ledger.MEMORY_ACCESS)),
            "models": {
                p.model: {
                    "inputPerMTok": ledger.credits_text(p.input_per_mtok),
                    "outputPerMTok": ledger.credits_text(p.output_per_mtok),
                    "cachedInputPerMTok": ledger.credits_text(p.cached_input_per_mtok),
                }
                for p in ModelPrice.objects.order_by("model")
            },
        }
        game = request.auth.game
        return Response({**ledger.account_summary(game), "prices": prices, **game_budget(game).wire()})


class LinesQuery(selectors.LINES.query()):
    turn = serializers.UUIDField(required=False, help_text="Only this turn's lines.")
    agent = serializers.RegexField(
        r"^[A-Za-z0-9_-]{0,64}$",
        required=False,
        allow_blank=True,
        help_text="Only this agent's lines (an agent name).",
        error_messages={"invalid": "must be an agent name: up to 64 of A–Z, a–z, 0–9, '_' and '-'."},
    )
    kind = serializers.ChoiceField(choices=CostKind.values, required=False)
    before = serializers.IntegerField(
        min_value=1,
        max_value=2**63 - 1,
        required=False,
        help_text="Lines older than this line id (or `cursor`).",
    )
    cursor_alias = "before"


class LinesView(APIView):
    @list_schema("billing_lines", LinesQuery, LinesOut, "Cost lines, newest first")
    def get(self, request):
        page = selectors.lines_page(game=request.auth.game, **query(LinesQuery, request))
        return Response(page.body())


AdjustmentsQuery = selectors.ADJUSTMENTS.query()


class AdjustmentsView(APIView):
    permission_classes = [HasGameKey]

    @list_schema("adjustments_list", AdjustmentsQuery, AdjustmentListOut, "Budget adjustments, newest first")
    def get(self, request):
        page = selectors.adjustments_page(game=request.auth.game, **query(AdjustmentsQuery, request))
        return Response(page.body())

    @extend_schema(
        operation_id="adjustment_post",
        request=None,
        responses=errors(403),
        summary="Refused to every API key: the studio's operators adjust credits",
        description=(
            "Credits are real money the operator pays model providers, so no API key adds or takes "
            "them away, whatever its role: the answer is always 403 `forbidden`. The studio's "
            "operators (staff users) adjust a game's credits on its billing page, in the admin, or "
            "with `manage.py adjustcredits SLUG AMOUNT --reason TEXT`."
        ),
    )
    def post(self, request):
        raise DomainError(
            "API keys do not add or take away credits, whatever their role. The studio's operators "
            "(its staff users) do: on the game's billing page, in the admin, or with "
            "`manage.py adjustcredits`. Ask them for a top-up.",
            status=403,
            code="forbidden",
        )


class LimitsSerializer(StrictSerializer):
    monthlyCap = UnsignedCreditsField(
        allow_null=True,
        required=False,
        help_text="Absent: kept. Admin keys may set a cap where there is none or lower it; "
        "raising it or removing it (null) is for the studio's operators (403 `forbidden`).",
    )
    lowBalanceAlert = UnsignedCreditsField(
        allow_null=True,
        required=False,
        help_text="Absent: kept. A balance; when a charge takes the balance below it, `budget.low` "
        "is sent (once, until the balance is back above it). null turns it off.",
    )


class LimitsView(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema(
        operation_id="limits_set",
        request=LimitsSerializer,
        responses={200: LimitsOut, **errors(400, 403)},
        summary="Set or lower the monthly spend cap, set the low-balance alert (admin keys)",
    )
    def put(self, request):
        data = valid(LimitsSerializer(data=request.data)).validated_data
        changes = {
            field: data[name]
            for name, field in (("monthlyCap", "monthly_cap"), ("lowBalanceAlert", "low_balance_alert"))
            if name in data
        }
        ledger.limits_set(game=request.auth.game, **changes)
        return Response(ledger.account_summary(request.auth.game))
