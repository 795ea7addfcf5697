from django import forms
from django.contrib import admin, messages
from django.contrib.admin import actions
from django.db import transaction
from django.shortcuts import redirect
from django.urls import reverse

from agents import services
from agents.models import Agent, Block, Checkpoint, Compaction, DefinedVia, Turn
from agents.pages.forms import CONFIG_FIELDS, ConfigChecks, refusal_as_form_error
from studio.admin import ReadOnlyAdmin
from studio.errors import DomainError
from studio.tokens import count_tokens


class AgentForm(ConfigChecks, forms.ModelForm):
    """An agent's config, checked by the definition-time rules here so a
    refusal shows on the form; the save itself is `agent_define`'s."""

    class Meta:
        model = Agent
        fields = ["game", "name", *CONFIG_FIELDS]

    def clean(self):
        data = super().clean()
        if not all(field in data for field in CONFIG_FIELDS):
            return data  # a field is in error already
        definition = self.definition()
        with refusal_as_form_error():
            services.definition_check(definition, system_tokens=count_tokens(definition.system_prompt))
        return data


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    """Agents are defined and deleted here as through the API: by
    `agent_define` (its rules, the system prompt's tokens recounted) and
    `agent_delete` (dead turns ended and their holds given back; refused
    while a turn is live)."""

    form = AgentForm
    list_display = ["name", "game", "model", "memory_enabled", "max_tokens", "last_block"]
    list_filter = ["game", "memory_enabled", "compaction_type"]
    actions = ["delete_selected"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["game", "name", *CONFIG_FIELDS]
        return ["game", "name", "system_prompt", "system_tokens", *CONFIG_FIELDS[1:], "last_block"]

    def get_readonly_fields(self, request, obj=None):
        # An agent's name is its address in the API and on its cost lines.
        return ["game", "name", "system_tokens", "last_block"] if obj else []

    def save_model(self, request, obj, form, change):
        agent, _ = services.agent_define(
            game=obj.game, name=obj.name, definition=form.definition(), by=request.user, via=DefinedVia.ADMIN
        )
        obj.pk = agent.pk
        obj.refresh_from_db()

    def get_deleted_objects(self, objs, request):
        # What an agent owns goes with it (`agent_delete`), though none of it
        # may be deleted on its own here.
        deleted, counts, _, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def delete_model(self, request, obj):
        services.agent_delete(agent=obj)

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except DomainError as error:  # a live turn: nothing was deleted
            self.message_user(request, error.message, messages.ERROR)
            return redirect(reverse("admin:agents_agent_change", args=[object_id]))

    @admin.action(permissions=["delete"], description="Delete selected agents")
    def delete_selected(self, request, queryset):
        """Django's confirmation page, then each agent through `agent_delete`:
        one with a live turn is kept, and the page says why."""
        if not request.POST.get("post"):
            return actions.delete_selected(self, request, queryset)
        deleted = 0
        for agent in queryset:
            try:
                with transaction.atomic():
                    self.log_deletions(request, [agent])
                    services.agent_delete(agent=agent)
            except DomainError as error:
                self.message_user(request, error.message, messages.ERROR)
            else:
                deleted += 1
        if deleted:
            self.message_user(
                request, f"Deleted {deleted} agent{'s' if deleted > 1 else ''}.", messages.SUCCESS
            )
        return None


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
