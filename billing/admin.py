import threading

from django import forms
from django.contrib import admin
from django.db.models import F
from django.utils.html import format_html

from studio.admin import ReadOnlyAdmin

from . import ledger
from .budgets import game_budget, game_budgets
from .models import Account, Adjustment, AlertDelivery, CostLine, Fee, ModelPrice, Refusal
from .templatetags.money import credits


class ModelPriceForm(forms.ModelForm):
    class Meta:
        model = ModelPrice
        fields = ["model", "input_per_mtok", "output_per_mtok", "cached_input_per_mtok"]
        labels = {
            "input_per_mtok": "Input (credits per million tokens)",
            "output_per_mtok": "Output (credits per million tokens)",
            "cached_input_per_mtok": "Cached input (credits per million tokens)",
        }
        help_texts = {
            "model": "The model exactly as a definition names it, with its provider's prefix: "
            "openai:gpt-4o-mini (any OpenAI-compatible server, OPENAI_BASE_URL), anthropic:claude-sonnet-4-5, "
            "or scripted (the offline test model). '*' prices every model without a row of its own.",
            "input_per_mtok": "Per million tokens, not per token: 0.15 here charges 0.15 credits for "
            "1,000,000 tokens of context sent to the model.",
            "output_per_mtok": "Per million tokens the model writes.",
            "cached_input_per_mtok": "Per million tokens of context the provider reports served from "
            "its cache; 0 when it has no cache price.",
        }


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    form = ModelPriceForm
    list_display = ["model", "input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "updated_at"]


@admin.register(Fee)
class FeeAdmin(admin.ModelAdmin):
    list_display = ["code", "amount", "updated_at"]


# The budgets of the accounts list being drawn, by this thread.
_drawn = threading.local()


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    """A game's credits move only through the ledger: adjustments (added on
    their own page) and cost lines. The monthly cap and the low-balance
    alert are what is edited here, and they too go through the ledger, which
    writes those columns alone under the account's lock — so saving this
    page while a turn is charged cannot put back the balance the page was
    loaded with. Everyone here is staff: they may raise or remove a cap."""

    list_display = [
        "game",
        "budget_state",
        "balance_shown",
        "held_shown",
        "monthly_cap_shown",
        "month_spent_shown",
        "low_balance_alert_shown",
        "runway",
        "updated_at",
    ]
    fields = ["game", "balance", "held", "monthly_cap", "month", "month_spent", "low_balance_alert"]
    readonly_fields = ["game", "balance", "held", "month", "month_spent"]

    def get_ordering(self, request):
        """The games closest to running out first: an admin adjusting
        budgets starts at the top (a column's header sorts by it instead)."""
        return [(F("balance") - F("held")).asc(), "game__name"]

    def changelist_view(self, request, extra_context=None):
        """The page's accounts with their budgets (state and runway), read
        for the page at once (`game_budgets`: a few statements, not a few
        per row), before the list is drawn."""
        response = super().changelist_view(request, extra_context)
        changelist = getattr(response, "context_data", {}).get("cl")
        if changelist is not None:
            accounts = list(changelist.result_list)
            budgets = {b.game.pk: b for b in game_budgets([a.game for a in accounts], is_operator=True)}
            # This thread's request's rows (the admin instance is shared).
            _drawn.budgets = {id(account): budgets[account.game_id] for account in accounts}
        return response

    def _budget(self, account: Account):
        found = getattr(_drawn, "budgets", {}).get(id(account))
        return found or game_budget(account.game, is_operator=True)

    @admin.display(description="State")
    def budget_state(self, account: Account):
        """The state every game card shows: ok, low (amber), refused (red)."""
        budget = self._budget(account)
        colour = {"ok": "#1f7a4d", "low": "#9a6200", "refused": "#b42318"}[budget.state]
        return format_html(
            '<strong data-budget-state="{}" style="color: {}" title="{}">● {}</strong>',
            budget.state,
            colour,
            budget.state_words,
            budget.state_label,
        )

    # Amounts as the pages show them: short, the ledger's six places on hover.
    @admin.display(description="Balance", ordering="balance")
    def balance_shown(self, account: Account):
        return credits(account.balance)

    @admin.display(description="Held", ordering="held")
    def held_shown(self, account: Account):
        return credits(account.held)

    @admin.display(description="Monthly cap", ordering="monthly_cap")
    def monthly_cap_shown(self, account: Account):
        return credits(account.monthly_cap) or "—"

    @admin.display(description="Month spent", ordering="month_spent")
    def month_spent_shown(self, account: Account):
        return credits(account.month_spent)

    @admin.display(description="Low-balance alert", ordering="low_balance_alert")
    def low_balance_alert_shown(self, account: Account):
        return credits(account.low_balance_alert) or "—"

    @admin.display(description="Runs out")
    def runway(self, account: Account) -> str:
        return self._budget(account).runway_words

    def get_queryset(self, request):
        # What is left to hold (`available`): the list is sorted by it, least first.
        return (
            super().get_queryset(request).select_related("game").annotate(available=F("balance") - F("held"))
        )

    def has_add_permission(self, request):
        return False  # every game opens its own account

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        ledger.limits_set(
            game=obj.game,
            monthly_cap=form.cleaned_data["monthly_cap"],
            low_balance_alert=form.cleaned_data["low_balance_alert"],
            by_staff=request.user.is_staff,
        )
        obj.refresh_from_db()


@admin.register(CostLine)
class CostLineAdmin(ReadOnlyAdmin):
    list_display = ["game", "agent_name", "kind", "quantity", "amount", "turn_id", "created_at"]
    list_filter = ["kind", "game"]


@admin.register(Refusal)
class RefusalAdmin(ReadOnlyAdmin):
    """Sends refused for money, counted per agent, cause and day."""

    list_display = ["game", "day", "agent_name", "cause", "count", "last_at"]
    list_filter = ["cause", "game"]


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(ReadOnlyAdmin):
    """Budget alerts on their way to a game's webhook or e-mail, and how each went."""

    list_display = ["game", "event", "channel", "status", "status_code", "attempts", "created_at"]
    list_filter = ["status", "channel", "event", "game"]


@admin.register(Adjustment)
class AdjustmentAdmin(admin.ModelAdmin):
    """Adjustments are added here by staff (through the ledger, so the
    balance moves with them) and never changed or deleted afterwards."""

    list_display = ["game", "amount", "reason", "made_by", "created_at"]
    list_filter = ["game"]
    fields = ["game", "amount", "reason"]

    def get_readonly_fields(self, request, obj=None):
        return ["game", "amount", "reason", "made_by", "created_at"] if obj else []

    def save_model(self, request, obj, form, change):
        if change:
            return
        posted = ledger.adjustment_post(
            game=obj.game, amount=obj.amount, reason=obj.reason, made_by=request.user.get_username()
        )
        obj.pk = posted.pk

    def has_delete_permission(self, request, obj=None):
        return False
