from django.contrib import admin

from . import keys
from .models import ApiKey, Game, Membership


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only the domain writes — turns, blocks, checkpoints, compactions,
    cost lines, memories and their history: shown here, never added, changed
    or deleted, since a write here would skip the rules that keep them true."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Game)
class GameAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        # A game is opened with its account, as everywhere else; without one
        # its first send and its billing page fail. No key is made here: a
        # key's text is shown once, by `manage.py createapikey`.
        game = keys.game_open(slug=obj.slug, name=obj.name)
        obj.pk = game.pk
        obj.refresh_from_db()


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    # Keys are made with `manage.py createapikey` (the text is shown once);
    # here they can only be inspected and revoked.
    list_display = ["prefix", "game", "role", "label", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["role", "game"]
    readonly_fields = ["game", "prefix", "digest", "created_at", "last_used_at"]

    def has_add_permission(self, request):
        return False
