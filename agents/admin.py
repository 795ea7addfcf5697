from django.contrib import admin

from studio.admin import ReadOnlyAdmin

from .models import Agent, Block, Checkpoint, Compaction, Turn


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "game", "model", "memory_enabled", "max_tokens", "last_block"]
    list_filter = ["game", "memory_enabled", "compaction_type"]
    readonly_fields = ["last_block", "system_tokens"]


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ["uuid", "agent", "status", "is_transient", "block_number", "created_at"]
    list_filter = ["status", "is_transient"]


@admin.register(Block)
class BlockAdmin(ReadOnlyAdmin):
    list_display = ["agent", "number", "status", "tokens", "folded"]
    list_filter = ["status", "folded"]


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ["agent", "kind", "through_block", "block_tokens", "created_at"]


@admin.register(Compaction)
class CompactionAdmin(ReadOnlyAdmin):
    list_display = ["uuid", "agent", "reason", "status", "attempts", "created_at", "finished_at"]
    list_filter = ["status", "reason"]
