from django.contrib import admin

from .models import Agent, Block, Checkpoint, Turn


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "game", "model", "memory_enabled", "max_tokens", "last_block"]
    list_filter = ["game", "memory_enabled", "compaction_type"]
    readonly_fields = ["last_block", "system_tokens"]


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin):
    list_display = ["uuid", "agent", "status", "is_transient", "block_number", "created_at"]
    list_filter = ["status", "is_transient"]
    readonly_fields = [f.name for f in Turn._meta.fields]


@admin.register(Block)
class BlockAdmin(admin.ModelAdmin):
    list_display = ["agent", "number", "status", "tokens", "folded"]
    list_filter = ["status", "folded"]
    readonly_fields = [f.name for f in Block._meta.fields]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["agent", "kind", "through_block", "block_tokens", "created_at"]
    readonly_fields = [f.name for f in Checkpoint._meta.fields]
