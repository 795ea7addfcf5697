"""Credits: a game's account, the price list, and the ledger.

The ledger is the account's adjustments (credits in) and cost lines
(credits out); `Account.balance` is kept equal to their difference by
`billing.ledger`, which moves both in one transaction. Cost lines that
retention deleted count as their sum, `Account.pruned_spend`.
"""

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models

CREDITS = {"max_digits": 18, "decimal_places": 6}
# A limit in credits (a cap, an alert's threshold) is never below zero.
LIMIT = {"null": True, "blank": True, "validators": [MinValueValidator(0)], **CREDITS}


class Account(models.Model):
    """A game's credits. `held` is what running turns have reserved (one
    model call's worst case each): a send starts only when the balance less
    what is held covers its own hold. `monthly_cap`, when set, bounds what
    the game spends in a calendar month (UTC), counted in `month_spent`.
    `low_balance_alert`, when set, is the balance below which the game's
    agents' streams are sent `budget.low`."""

    game = models.OneToOneField("studio.Game", on_delete=models.CASCADE, related_name="account")
    balance = models.DecimalField(default=Decimal("0"), **CREDITS)
    held = models.DecimalField(default=Decimal("0"), **CREDITS)
    # The turns `held` is for (live ones, and ended ones whose last model
    # call is still to be charged): what STUDIO_MAX_LIVE_TURNS_PER_GAME bounds.
    live_turns = models.PositiveIntegerField(default=0)
    monthly_cap = models.DecimalField(**LIMIT)
    month = models.DateField(null=True, blank=True)
    month_spent = models.DecimalField(default=Decimal("0"), **CREDITS)
    # The month whose budget.low event has been sent (once a month).
    low_warned_month = models.DateField(null=True, blank=True)
    low_balance_alert = models.DecimalField(**LIMIT)
    # Whether budget.low has been sent for the balance being below the alert
    # (cleared once the balance is back at or above it, to be sent again).
    low_balance_warned = models.BooleanField(default=False)
    # The sum of the cost lines retention deleted (STUDIO_RETAIN_COST_LINES_DAYS),
    # carried forward so the ledger still balances: the balance is the
    # adjustments less the cost lines kept less this.
    pruned_spend = models.DecimalField(default=Decimal("0"), **CREDITS)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.game} account"


class ModelPrice(models.Model):
    """Credits per million tokens for one model (`scripted`,
    `openai:gpt-4o-mini`, …). The row named `*` prices any model without
    its own row."""

    model = models.CharField(max_length=200, unique=True)
    input_per_mtok = models.DecimalField(**CREDITS)
    output_per_mtok = models.DecimalField(**CREDITS)
    cached_input_per_mtok = models.DecimalField(default=Decimal("0"), **CREDITS)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.model


class Fee(models.Model):
    """A flat fee by code; `memory_access` is charged per memory tool call."""

    code = models.CharField(max_length=64, unique=True)
    amount = models.DecimalField(**CREDITS)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.code


class CostKind(models.TextChoices):
    MODEL = "model", "Model"
    MEMORY_ACCESS = "memory_access", "Memory access"
    COMPACTION = "compaction", "Compaction"


class CostLine(models.Model):
    """Credits spent: one line per kind per turn (or per compaction).

    It names its turn and agent by value rather than by foreign key: the
    ledger outlives a deleted agent. `detail` keeps the prices the line was
    charged at and the counts behind its quantity.
    """

    game = models.ForeignKey("studio.Game", on_delete=models.CASCADE, related_name="cost_lines")
    agent_name = models.CharField(max_length=64, blank=True)
    turn_id = models.UUIDField(null=True, blank=True)
    compaction_id = models.UUIDField(null=True, blank=True)
    kind = models.CharField(max_length=32, choices=CostKind.choices)
    label = models.CharField(max_length=100)
    quantity = models.BigIntegerField(default=0)
    amount = models.DecimalField(default=Decimal("0"), **CREDITS)
    detail = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["turn_id", "kind"],
                condition=models.Q(turn_id__isnull=False),
                name="one_line_per_kind_per_turn",
            )
        ]
        indexes = [models.Index(fields=["game", "id"]), models.Index(fields=["game", "turn_id"])]

    def __str__(self) -> str:
        return f"{self.label} {self.amount}"


class Adjustment(models.Model):
    """Credits put in (or taken out) by a person or a script, and why."""

    game = models.ForeignKey("studio.Game", on_delete=models.CASCADE, related_name="adjustments")
    amount = models.DecimalField(**CREDITS)
    reason = models.TextField()
    made_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.amount} ({self.reason})"
