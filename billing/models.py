"""Credits: a game's account, the price list, and the ledger.

The ledger is the account's adjustments (credits in) and cost lines
(credits out); `Account.balance` is kept equal to their difference by
`billing.ledger`, which moves both in one transaction. Cost lines that
retention deleted count as their sum, `Account.pruned_spend`.
"""

import uuid
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
    # When a send was last refused for want of credits or cap room: a
    # refusal after a quiet spell (or after the budget changed) starts the
    # game's refusals, which the game's alerts are told of.
    refused_at = models.DateTimeField(null=True, blank=True)
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
        indexes = [
            models.Index(fields=["game", "id"]),
            models.Index(fields=["game", "turn_id"]),
            # The spend rate: a game's lines of the last day and week, summed.
            models.Index(fields=["game", "created_at"], name="billing_line_game_time"),
        ]

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


class RefusalCause(models.TextChoices):
    """Why a send was refused for money: the real cause, per agent."""

    BALANCE_EXHAUSTED = "balance_exhausted", "No credits left"
    HOLD_OVER_BALANCE = "hold_over_balance", "Its hold is more than the credits left"
    CAP_REACHED = "cap_reached", "Monthly cap reached"
    HOLD_OVER_CAP = "hold_over_cap", "Its hold is more than the cap leaves"
    COMPACTION_UNPAID = "compaction_unpaid", "A compaction waits for credits"


class Refusal(models.Model):
    """Sends refused for money: a count per agent, cause and day (UTC), with
    the last one's words — so a game refused a thousand times a day keeps
    a row per agent and cause, and `manage.py prune` deletes the days past
    STUDIO_RETAIN_REFUSALS_DAYS."""

    game = models.ForeignKey("studio.Game", on_delete=models.CASCADE, related_name="refusals")
    agent_name = models.CharField(max_length=64, blank=True)
    cause = models.CharField(max_length=32, choices=RefusalCause.choices)
    day = models.DateField()
    count = models.PositiveIntegerField(default=1)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    # The last refusal's: what the send would have held, what was left, its words.
    hold = models.DecimalField(default=Decimal("0"), **CREDITS)
    left = models.DecimalField(default=Decimal("0"), **CREDITS)
    message = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["game", "day", "agent_name", "cause"], name="one_refusal_row_a_day"
            )
        ]
        indexes = [models.Index(fields=["game", "last_at"])]

    def __str__(self) -> str:
        return f"{self.agent_name} {self.cause} ×{self.count}"


class AlertSettings(models.Model):
    """Where a game's budget alerts go besides its event streams: a webhook
    (its URL, and the secret its deliveries are signed with) and an e-mail
    address (blank: the game's admins' addresses). Set by the game's admins."""

    game = models.OneToOneField("studio.Game", on_delete=models.CASCADE, related_name="alert_settings")
    webhook_url = models.URLField(max_length=2000, blank=True)
    webhook_secret = models.CharField(max_length=100, blank=True)
    email = models.EmailField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.game} alerts"


class DeliveryChannel(models.TextChoices):
    WEBHOOK = "webhook", "Webhook"
    EMAIL = "email", "E-mail"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class AlertDelivery(models.Model):
    """One alert on its way to one place: made in the transaction that
    raised the alert, tried after it commits, and again with backoff until
    it is delivered or its attempts run out (STUDIO_ALERT_MAX_ATTEMPTS).
    `manage.py prune` deletes those past STUDIO_RETAIN_ALERT_DELIVERIES_DAYS."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    game = models.ForeignKey("studio.Game", on_delete=models.CASCADE, related_name="alert_deliveries")
    channel = models.CharField(max_length=16, choices=DeliveryChannel.choices)
    event = models.CharField(max_length=64)
    # The webhook's URL, or the e-mail's addresses (comma-separated), as they were then.
    target = models.TextField()
    body = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # A pending delivery's next attempt is due then (an attempt under way moves it past itself).
    next_attempt_at = models.DateTimeField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["game", "id"]),
            models.Index(fields=["status", "next_attempt_at"], name="billing_delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.channel} ({self.status})"
