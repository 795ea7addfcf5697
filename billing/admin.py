from django.contrib import admin

from .models import Account, Adjustment, CostLine, Fee, ModelPrice


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = ["model", "input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "updated_at"]


@admin.register(Fee)
class FeeAdmin(admin.ModelAdmin):
    list_display = ["code", "amount", "updated_at"]


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ["game", "balance", "updated_at"]
    readonly_fields = ["game", "balance"]


@admin.register(CostLine)
class CostLineAdmin(admin.ModelAdmin):
    list_display = ["game", "agent_name", "kind", "quantity", "amount", "turn_id", "created_at"]
    list_filter = ["kind", "game"]
    readonly_fields = [f.name for f in CostLine._meta.fields]


@admin.register(Adjustment)
class AdjustmentAdmin(admin.ModelAdmin):
    list_display = ["game", "amount", "reason", "made_by", "created_at"]
    readonly_fields = [f.name for f in Adjustment._meta.fields]
