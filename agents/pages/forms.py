"""The Agents pages' forms: an agent's config (its checks shared with the
Django admin's form: the definition-time rules, a refusal shown as a form
error), the game's default model, a fork's name, a replay's definition, an
agent file to import."""

from contextlib import contextmanager
from dataclasses import fields, replace

from django import forms
from django.conf import settings
from django.template.defaultfilters import filesizeformat

from agents import providers, selectors, services
from agents.api.file_format import agent_file_read
from agents.game_tools import tools_check
from agents.models import NUMBER_MAX, Agent, CompactionType
from agents.replays import REPLAY_MAX_BLOCKS
from agents.wire import config_wire
from memories.models import Memory
from studio.errors import DomainError
from studio.http.parsers import JSONBeyondBounds, json_read

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

    def clean_tools(self):
        """The game's tools as JSON (a list of {name, description,
        parameters, timeoutSeconds?}), checked as a definition's."""
        value = self.cleaned_data.get("tools")
        with refusal_as_form_error():
            return tuple(tools_check(value or []))

    def definition(self) -> services.AgentDefinition:
        return services.AgentDefinition(**{field: self.cleaned_data[field] for field in CONFIG_FIELDS})


# --- the pages' forms ---------------------------------------------------------------------


class FirstErrorFocus:
    """After a refused post the page opens on the first field in error
    (the form may be far down the page)."""

    def _post_clean(self):
        super()._post_clean()
        self._focus(next(iter(self.errors), None))

    def _focus(self, field: str | None) -> None:
        if field in self.fields and not any("autofocus" in f.widget.attrs for f in self.fields.values()):
            self.fields[field].widget.attrs["autofocus"] = True


class AgentConfigForm(FirstErrorFocus, ConfigChecks, forms.Form):
    """An agent's config as the page edits it; `definition()` is what
    `agent_define` takes. Numeric bounds are the API's."""

    system_prompt = forms.CharField(
        required=False, strip=False, max_length=200_000, widget=forms.Textarea(attrs={"rows": 10})
    )
    # Blank: the game's default model.
    model = forms.CharField(max_length=200, required=False)
    memory_enabled = forms.BooleanField(required=False, initial=True)
    max_open_tokens = forms.IntegerField(
        required=False, min_value=1, max_value=10_000_000, initial=services.DEFAULT_MAX_OPEN_TOKENS
    )
    compaction_type = forms.ChoiceField(choices=CompactionType.choices, initial=CompactionType.SUMMARIZE)
    max_tokens = forms.IntegerField(min_value=256, max_value=10_000_000, initial=services.DEFAULT_MAX_TOKENS)
    tools = forms.JSONField(
        required=False,
        initial=list,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false", "class": "mono"}),
    )
    # The revision the agent was at when the page was read: an edit over a
    # config defined since is not saved (the page's If-Match). Blank: any.
    revision = forms.IntegerField(required=False, min_value=0, widget=forms.HiddenInput)

    def __init__(self, *args, game, prefix_id: str = "config", **kwargs):
        super().__init__(*args, auto_id=f"{prefix_id}-%s", **kwargs)
        self.has_budget_error = False
        # What a blank model gets, for the field's placeholder and hint.
        self.default_model = providers.default_model(game)
        if self.default_model:
            self.fields["model"].widget.attrs["placeholder"] = self.default_model
        # The models to pick from (the field still takes any name).
        self.models_offered = selectors.models_offered()
        self.fields["model"].widget.attrs["list"] = f"{prefix_id}-models-offered"

    def clean_max_open_tokens(self):
        value = self.cleaned_data["max_open_tokens"]
        return services.DEFAULT_MAX_OPEN_TOKENS if value is None else value

    def add_domain_error(self, error: DomainError) -> None:
        """Show what `agent_define` refused next to the fields it is about."""
        if error.code == "invalid_name" and "name" in self.fields:
            self.add_error("name", error.message)
            self._focus("name")
            return
        if any(problem["field"] == "model" for problem in error.details or ()):
            self.add_error("model", error.message)  # no model named, and the default refused
            self._focus("model")
            return
        if error.code == "invalid_definition":
            # A model named was checked in clean_model, so this is the budget rule.
            self.has_budget_error = True
            for field in ("max_open_tokens", "max_tokens"):
                self.fields[field].widget.attrs["aria-invalid"] = "true"
        self.add_error(None, error.message)
        self._focus("max_open_tokens")

    def if_match(self) -> frozenset[str] | None:
        """The revision the edit was made on, as `agent_define` takes it."""
        revision = self.cleaned_data.get("revision")
        return None if revision is None else frozenset({str(revision)})

    def defined_since(self, agent: Agent) -> None:
        """Say the agent was defined again since the page was read, by whom,
        and keep the edit, now read at that revision: saving it again
        replaces that revision knowingly."""
        self.add_error(
            None,
            f"Not saved: {agent.name} was defined again since this page was read — "
            f"{services.revision_now(agent)}. Your edit is still below: Save config again to replace "
            "that revision with it, or reload the page to start from it.",
        )
        self.data = self.data.copy()
        self.data["revision"] = str(agent.revision)

    def misses_memory(self, words: list[str]) -> bool:
        """The prompting warning, for the values the form holds now."""
        memory_on = self["memory_enabled"].value()
        return prompt_misses_memory(
            prompt=self["system_prompt"].value() or "", memory_enabled=bool(memory_on), words=words
        )

    @property
    def rule_limit(self) -> str:
        """The most maxOpenTokens may be, for the hint by the fields."""
        value = self["max_tokens"].value()
        try:
            return f"{services.max_open_tokens_allowed(int(value)):,}"
        except (TypeError, ValueError):
            return ""


class NewAgentForm(AgentConfigForm):
    name = forms.CharField(max_length=64, help_text="1–64 of A–Z a–z 0–9 _ -")
    field_order = ["name"]

    def __init__(self, *args, game, **kwargs):
        super().__init__(*args, game=game, prefix_id="new", **kwargs)
        self.game = game

    def clean_name(self):
        name = super().clean_name()
        if Agent.objects.filter(game=self.game, name=name).exists():
            raise forms.ValidationError(f"There is already an agent named '{name}': change it on its page.")
        return name


class DefaultModelForm(forms.Form):
    """The game's default model; blank: the studio's. Checked by
    `services.game_default_model_set`."""

    default_model = forms.CharField(max_length=200, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.models_offered = selectors.models_offered()

    def clean_default_model(self) -> str | None:
        return self.cleaned_data["default_model"].strip() or None


def config_initial(agent: Agent) -> dict:
    initial = {field: getattr(agent, field) for field in CONFIG_FIELDS}
    initial["tools"] = list(agent.tools or ())
    initial["revision"] = agent.revision
    return initial


class NameErrors(FirstErrorFocus):
    """What the studio refused about a new agent, shown next to its name
    when it is about the name, else next to `other_field`."""

    other_field: str | None = None

    def add_domain_error(self, error: DomainError) -> None:
        field = "name" if error.code in ("invalid_name", "name_taken") else self.other_field
        self.add_error(field, problems(error))
        self._focus(field)


class ForkForm(NameErrors, forms.Form):
    name = forms.CharField(max_length=64, label="Name of the new agent")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, auto_id="fork-%s", **kwargs)


def fork_name(agent: Agent, number: int) -> str:
    """A name to offer for a fork of `agent` at block `number`."""
    suffix = f"-from-{number}"
    return agent.name[: 64 - len(suffix)] + suffix


class ReplayForm(AgentConfigForm):
    """A replay from block `number`: the definition to replay with (the
    agent's config, changed) and its last block. A blank model keeps the
    agent's."""

    blank_keeps_model = True
    through = forms.IntegerField(min_value=1, max_value=NUMBER_MAX, label="Through block")

    def __init__(self, *args, game, **kwargs):
        super().__init__(*args, game=game, prefix_id="replay", **kwargs)
        self.fields["model"].widget.attrs.pop("placeholder", None)
        self.refusal: str | None = None  # what the studio refused, when it is about no field

    def changes(self, agent: Agent) -> dict:
        """What the definition changes of `agent`'s config, in its wire shape."""
        definition = self.definition()
        asked = config_wire(replace(definition, model=definition.model or agent.model))
        now = config_wire(agent)
        return {key: value for key, value in asked.items() if value != now[key]}

    def add_domain_error(self, error: DomainError) -> None:
        if any(problem["field"] == "through" for problem in error.details or ()):
            self.add_error("through", error.details[0]["message"])
            self._focus("through")
        elif error.code == "invalid_definition":
            super().add_domain_error(error)
        else:
            self.refusal = error.message


def replay_initial(agent: Agent, number: int, newest: int) -> dict:
    """The replay form of block `number`: the agent's config as it is, and
    as many blocks from `number` as a replay plays, up to `newest`."""
    return {**config_initial(agent), "through": max(number, min(newest, number + REPLAY_MAX_BLOCKS - 1))}


class ImportForm(NameErrors, forms.Form):
    """An agent file to import; `file` cleans to the checked document."""

    file = forms.FileField(
        label="Agent file", widget=forms.FileInput(attrs={"accept": ".json,application/json"})
    )
    name = forms.CharField(max_length=64, required=False, label="New name (optional)")
    other_field = "file"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, auto_id="import-%s", **kwargs)

    def clean_file(self):
        upload = self.cleaned_data["file"]
        cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if upload.size > cap:
            raise forms.ValidationError(
                f"The file is {filesizeformat(upload.size)}; the studio imports agent files up to "
                f"{filesizeformat(cap)} (STUDIO_MAX_BODY_BYTES)."
            )
        try:
            document = json_read(upload.read())
        except JSONBeyondBounds as beyond:
            raise forms.ValidationError(f"This file is not an agent file: {beyond}") from None
        except ValueError:
            raise forms.ValidationError(
                "This file is not JSON: an agent file is the JSON document an agent's Export downloads."
            ) from None
        try:
            return agent_file_read(document)
        except DomainError as refused:
            raise forms.ValidationError(problems(refused)) from None


def problems(error: DomainError) -> list[str]:
    """What the studio refused, one sentence a problem (its details), not
    joined into one: a form shows each on a line of its own."""
    found = [f"{d['field']}: {d['message']}" if d["field"] else d["message"] for d in error.details or ()]
    return found or [error.message]


# --- the prompting heuristic -------------------------------------------------------------
# Words that show a system prompt talks about memory at all (the agent's own
# memory names count too): the heuristic behind the prompting warning.
MEMORY_WORDS = ("memory", "memories")
MEMORY_NAMES_LOOKED_FOR = 50


def memory_words(agent: Agent | None) -> list[str]:
    """What a prompt that talks about memory would mention: the words
    themselves, and the names of the agent's memories — its oldest
    MEMORY_NAMES_LOOKED_FOR, as the page lists them and a store may hold
    thousands."""
    names = Memory.objects.filter(agent=agent).order_by("id").values_list("name", flat=True)
    names = list(names[:MEMORY_NAMES_LOOKED_FOR]) if agent else []
    return [*MEMORY_WORDS, *names]


def prompt_misses_memory(*, prompt: str, memory_enabled: bool, words: list[str]) -> bool:
    """Memory is on but the prompt names no memory: the agent has the
    tools and no idea what to keep in them. Not said of an empty prompt:
    nothing has been typed yet to be warned about."""
    text = prompt.lower()
    return memory_enabled and bool(text.strip()) and not any(word.lower() in text for word in words)
