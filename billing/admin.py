from django.contrib import admin

from . import ledger
from .models import Account, Adjustment, CostLine, Fee, ModelPrice


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = ["model", "input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "updated_at"]


@admin.register(Fee)
class FeeAdmin(admin.ModelAdmin):
    list_display = ["code", "amount", "updated_at"]


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    # The balance moves only through the ledger (adjustments and cost
    # lines); the monthly cap is the one thing edited here.
    list_display = ["game", "balance", "held", "monthly_cap", "month_spent", "updated_at"]
    fields = ["game", "balance", "held", "monthly_cap", "month", "month_spent"]
    readonly_fields = ["game", "balance", "held", "month", "month_spent"]

    def has_add_permission(self, request):
        return False


@admin.register(CostLine)
class CostLineAdmin(admin.ModelAdmin):
    list_display = ["game", "agent_name", "kind", "quantity", "amount", "turn_id", "created_at"]
    list_filter = ["kind", "game"]
    readonly_fields = [f.name for f in CostLine._meta.fields]


@admin.register(Adjustment)
class AdjustmentAdmin(admin.ModelAdmin):
    """Adjustments are added here (through the ledger, so the balance moves
    with them) and never changed or deleted afterwards."""

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
