"""What the two forms over an agent's config share — the studio's page
(`page_data`) and the Django admin (`admin`): the definition-time checks,
a refusal shown as a form error, and the definition the form holds."""

from contextlib import contextmanager
from dataclasses import fields

from django import forms

from studio.errors import DomainError

from . import services

# The config an agent is defined with, in the order the forms show it
# (a field that does not compare is not config).
CONFIG_FIELDS = [field.name for field in fields(services.AgentDefinition) if field.compare]


@contextmanager
def refusal_as_form_error():
    """A rule the domain refuses inside this block is the form's error."""
    try:
        yield
    except DomainError as error:
        raise forms.ValidationError(error.message) from None


class ConfigChecks:
    """For a form with the CONFIG_FIELDS (and perhaps a `name`): each field
    checked by the rule `agent_define` applies to it."""

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        with refusal_as_form_error():
            services.agent_name_check(name)
        return name

    def clean_model(self):
        model = (self.cleaned_data["model"] or "").strip()
        if not model:
            return None  # the game's default: `agent_define` resolves and checks it
        with refusal_as_form_error():
            services.model_usable_check(model)
        return model

    def definition(self) -> services.AgentDefinition:
        return services.AgentDefinition(**{field: self.cleaned_data[field] for field in CONFIG_FIELDS})
