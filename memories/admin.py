from django.contrib import admin

from .models import Memory, MemoryEvent


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    # Read-only: only the agent and the compactor write memories.
    list_display = ["name", "agent", "is_open", "tokens", "bytes", "updated_by", "updated_at"]
    list_filter = ["is_open", "updated_by"]
    readonly_fields = [f.name for f in Memory._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(MemoryEvent)
class MemoryEventAdmin(admin.ModelAdmin):
    list_display = ["name", "agent", "change", "by", "created_at"]
    list_filter = ["change", "by"]
    readonly_fields = [f.name for f in MemoryEvent._meta.fields]
