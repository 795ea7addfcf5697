from django.contrib import admin

from studio.admin import ReadOnlyAdmin

from .models import Memory, MemoryEvent


@admin.register(Memory)
class MemoryAdmin(ReadOnlyAdmin):
    # Only the agent and the compactor write memories.
    list_display = ["name", "agent", "is_open", "tokens", "bytes", "updated_by", "updated_at"]
    list_filter = ["is_open", "updated_by"]


@admin.register(MemoryEvent)
class MemoryEventAdmin(ReadOnlyAdmin):
    list_display = ["name", "agent", "change", "by", "created_at"]
    list_filter = ["change", "by"]
