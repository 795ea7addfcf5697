from django import forms
from django.contrib import admin, messages

from agents import services
from agents.pages.forms import refusal_as_form_error

from .auth import keys
from .models import ApiKey, Game, Membership
from .services import game_open


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


class GameForm(forms.ModelForm):
    """A game, its default model checked as a definition's model is (the
    refusal shown on the form)."""

    class Meta:
        model = Game
        fields = ["slug", "name", "default_model"]

    def clean_default_model(self):
        model = self.cleaned_data["default_model"].strip()
        if model:
            with refusal_as_form_error():
                services.model_usable_check(model, then="save the game again")
        return model


@admin.register(Game)
class GameAdmin(admin.ModelAdmin):
    form = GameForm
    list_display = ["slug", "name", "default_model", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

    def save_model(self, request, obj, form, change):
        default_model = obj.default_model or None
        if change:
            obj.save(update_fields=["slug", "name"])
        else:
            # A game is opened with its account, as everywhere else; without
            # one its first send and its billing page fail. No key is made
            # here: a key's text is shown once, by `manage.py createapikey`.
            obj.pk = game_open(slug=obj.slug, name=obj.name).pk
        services.game_default_model_set(game=obj, model=default_model)
        obj.refresh_from_db()


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are made here (or with `manage.py createapikey`) by
    `keys.apikey_create`, which keeps only a digest: the key's text is shown
    once, in the message after the save. A key is then inspected and
    revoked, never changed into another."""

    list_display = ["prefix", "game", "role", "label", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["role", "game"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["game", "role", "label"]
        return ["game", "role", "label", "prefix", "digest", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request, obj=None):
        return ["game", "prefix", "digest", "created_at", "last_used_at"] if obj else []

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        key, text = keys.apikey_create(game=obj.game, role=obj.role, label=obj.label)
        obj.pk, obj.prefix = key.pk, key.prefix
        self.message_user(
            request,
            f"The new {key.role} key for '{key.game.slug}' is {text} — copy it now: it is shown only "
            "this once, and the studio keeps no copy of it.",
            messages.WARNING,
        )
