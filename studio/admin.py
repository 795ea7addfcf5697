from django.contrib import admin

from .models import ApiKey, Game, Membership


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Game)
class GameAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    # Keys are made with `manage.py createapikey` (the text is shown once);
    # here they can only be inspected and revoked.
    list_display = ["prefix", "game", "role", "label", "created_at", "revoked_at"]
    list_filter = ["role", "game"]
    readonly_fields = ["game", "prefix", "digest", "created_at"]

    def has_add_permission(self, request):
        return False
