"""What the Agents pages show, gathered from the domain: the config forms,
and the sections of an agent's page (each computed only when its template
asks for it, so a live fragment costs only its own queries)."""

from functools import cached_property

from django import forms
from django.conf import settings
from django.db.models import Q, Sum
from django.template.defaultfilters import filesizeformat

from billing import ledger
from billing.models import CostLine
from memories import store
from memories.models import Memory
from studio.api_fields import valid
from studio.errors import DomainError
from studio.page_helpers import meter, share, tone
from studio.parsers import TOO_DEEP, JSONTooDeep, json_read

from . import history_reads, selectors, services
from .context import Context, NotRecorded, context_assemble, current_checkpoint
from .file_format import AgentFile
from .forms import CONFIG_FIELDS, ConfigChecks
from .models import LIVE_STATUSES, Agent, Block, Compaction, CompactionType, Turn, TurnStatus

HISTORY_PAGE_SIZE = 20
COMPACTIONS_SHOWN = 5
# Blocks the timeline offers; older ones are reached from the history.
TIMELINE_BLOCKS = 200
# Words that show a system prompt talks about memory at all (the agent's own
# memory names count too): the heuristic behind the prompting warning.
MEMORY_WORDS = ("memory", "memories")
MEMORY_NAMES_LOOKED_FOR = 50


# --- the config forms ----------------------------------------------------------------


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

    def __init__(self, *args, game, prefix_id: str = "config", **kwargs):
        super().__init__(*args, auto_id=f"{prefix_id}-%s", **kwargs)
        self.has_budget_error = False
        # What a blank model gets, for the field's placeholder and hint.
        self.default_model = selectors.default_model(game)
        if self.default_model:
            self.fields["model"].widget.attrs["placeholder"] = self.default_model

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

    def clean_default_model(self) -> str | None:
        return self.cleaned_data["default_model"].strip() or None


def config_initial(agent: Agent) -> dict:
    return {field: getattr(agent, field) for field in CONFIG_FIELDS}


# --- the prompting heuristic -----------------------------------------------------------


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
    tools and no idea what to keep in them."""
    text = prompt.lower()
    return memory_enabled and not any(word.lower() in text for word in words)


# --- the compaction line -----------------------------------------------------------------


def soft_ratio() -> float:
    return settings.STUDIO["COMPACTION_SOFT_RATIO"]


# --- the list page ------------------------------------------------------------------------


def agent_rows(game) -> list[dict]:
    """Each agent of the game with its stats and bars."""
    agents = list(Agent.objects.filter(game=game).order_by("name"))
    stats_by_agent = selectors.agents_stats(agents)
    rows = []
    for agent in agents:
        stats = stats_by_agent[agent.pk]
        rows.append(
            {
                "agent": agent,
                "stats": stats,
                "verbatim_share": share(stats["verbatimTokens"], agent.max_tokens),
                "verbatim_tone": tone(stats["verbatimTokens"], agent.max_tokens),
            }
        )
    return rows


# --- the agent page -----------------------------------------------------------------------


class AgentPage:
    """The sections of one agent's page. Each is a cached property, so the
    template computes only the sections it renders, once."""

    def __init__(self, agent: Agent, *, before: int | None = None):
        self.agent = agent
        self.before = before

    @cached_property
    def stats(self) -> dict:
        stats = selectors.agent_stats(self.agent)
        agent = self.agent
        return {
            **stats,
            "openShare": share(stats["openTokens"], agent.max_open_tokens),
            "openTone": tone(stats["openTokens"], agent.max_open_tokens),
            "storeCap": store.store_cap_bytes(),
            "storeShare": share(stats["storeBytes"], store.store_cap_bytes()),
            "storeTone": tone(stats["storeBytes"], store.store_cap_bytes()),
            "checkpoint": self.checkpoint,
        }

    @cached_property
    def context(self) -> dict:
        """Exactly what the next model call is given, with its token split."""
        return context_view(context_assemble(self.agent))

    @cached_property
    def checkpoint(self):
        return current_checkpoint(self.agent)

    @cached_property
    def compactions(self) -> list[dict]:
        items = list(
            Compaction.objects.filter(agent=self.agent)
            .select_related("checkpoint")
            .order_by("-id")[:COMPACTIONS_SHOWN]
        )
        costs = dict(
            CostLine.objects.filter(compaction_id__in=[item.uuid for item in items])
            .values("compaction_id")
            .annotate(total=Sum("amount"))
            .values_list("compaction_id", "total")
        )
        return [
            {
                **selectors.compaction_wire(item),
                "reasonLabel": item.get_reason_display(),
                "created": item.created_at,
                "finished": item.finished_at,
                "cost": costs.get(item.uuid),
            }
            for item in items
        ]

    @cached_property
    def history(self) -> dict:
        """A page of blocks, newest first, each with its turn's cost."""
        blocks = Block.objects.filter(agent=self.agent).select_related("turn").order_by("-number")
        if self.before:
            blocks = blocks.filter(number__lt=self.before)
        page = list(blocks[: HISTORY_PAGE_SIZE + 1])
        has_older, page = len(page) > HISTORY_PAGE_SIZE, page[:HISTORY_PAGE_SIZE]
        # One query for every shown turn's lines, not one per block.
        lines = ledger.lines_by_turn([block.turn.uuid for block in page if block.turn])
        items = [block_view(block, lines) for block in page]
        first_folded = next((item for item in items if item["folded"]), None)
        if first_folded:
            first_folded["starts_folded"] = True
        return {
            "blocks": items,
            "older": page[-1].number if has_older else None,
            "is_newest": not self.before,
            "total": self.agent.last_block,
        }

    @cached_property
    def timeline(self) -> dict:
        return timeline_view(self.agent)

    @cached_property
    def waiting_turns(self) -> list[Turn]:
        """Live sends that have no block to show them: queued ones, and
        transient ones (which never get a block)."""
        return list(
            Turn.objects.filter(agent=self.agent, status__in=LIVE_STATUSES)
            .filter(Q(is_transient=True) | Q(status=TurnStatus.QUEUED))
            .order_by("id")
        )


# The most messages of a context a page lists (the newest): an agent whose
# compactions cannot run, or an imported one, may have thousands verbatim.
CONTEXT_MESSAGES_SHOWN = 300


def context_view(context: Context) -> dict:
    """A context as the pages show it: its parts, and their tokens against
    maxTokens; of its messages, the newest CONTEXT_MESSAGES_SHOWN."""
    tokens = context.tokens()
    budget = tokens["maxTokens"]
    shown = context.messages[-CONTEXT_MESSAGES_SHOWN:]
    return {
        "system": context.system,
        "context_block": context.context_block,
        "messages": shown,
        "message_count": len(context.messages),
        "messages_not_shown": len(context.messages) - len(shown),
        "tools": context.tools,
        "tokens": tokens,
        # Shown before every count that is not the model's own tokenizer's.
        "approx": "≈" if tokens["estimate"] else "",
        "model": context.model,
        "through_block": context.through_block,
        "shares": {
            part: share(tokens[part], budget) for part in ("system", "tools", "contextBlock", "messages")
        },
        "total_share": share(tokens["total"], budget),
        "tone": tone(tokens["total"], budget),
        "soft_share": round(soft_ratio() * 100, 1),
        "soft_tokens": int(soft_ratio() * budget),
    }


def block_view(block: Block, lines: dict) -> dict:
    """A block as the history shows it, with its turn's cost (`lines`: cost lines by turn id)."""
    turn = block.turn
    return {
        **selectors.block_wire(block),
        "created": block.created_at,
        "turn": turn,
        "error": turn.error if turn else "",
        "cost": selectors.turn_cost(turn, lines.get(turn.uuid, [])) if turn else None,
        "can_cancel": block.status in LIVE_STATUSES and turn is not None,
    }


# --- through time: the timeline, an agent as of a block, forks and agent files ---------------


def timeline_view(agent: Agent, *, current: int | None = None) -> dict:
    """The newest blocks, oldest first, each checkpoint standing before the
    first block it was in force for (the one in force before the first
    block shown, first). `items` are {"block": …} or {"checkpoint": …}."""
    line = history_reads.timeline(agent, limit=TIMELINE_BLOCKS)
    blocks = line["blocks"]
    first = blocks[0]["block"] if blocks else 1
    items, marks = [], {}
    for checkpoint in line["checkpoints"]:
        at = checkpoint["fromBlock"] or checkpoint["throughBlock"] + 1
        if at < first:
            items = [{"checkpoint": checkpoint}]
        else:
            marks.setdefault(at, []).append({"checkpoint": checkpoint})
    for block in blocks:
        items += marks.pop(block["block"], [])
        items.append({"block": {**block, "is_current": block["block"] == current}})
    for at in sorted(marks):
        items += marks[at]
    return {
        "items": items,
        "first": first,
        "shown": len(blocks),
        "total": agent.last_block,
        "pruned": line["pruned"],
    }


class AsOfPage:
    """An agent as it stood when block `number` ended: the block, the store
    then, what its first model call was given and the checkpoint in force.
    `refusal` is why it cannot be shown (no such block, still being played,
    played before the studio kept its changes)."""

    def __init__(self, agent: Agent, number: int):
        self.agent = agent
        self.number = number
        self.block, self.refusal = None, None
        try:
            self.block = history_reads.block_at(agent, number)
        except DomainError as refusal:
            self.refusal = refusal

    @cached_property
    def timeline(self) -> dict:
        return timeline_view(self.agent, current=self.number)

    @cached_property
    def block_view(self) -> dict:
        turn = self.block.turn
        return block_view(self.block, ledger.lines_by_turn([turn.uuid] if turn else []))

    @cached_property
    def memories(self) -> dict:
        store_then = history_reads.memories_at_block(self.agent, self.number)
        return {
            **store_then,
            "open_meter": meter(store_then["openTokens"], store_then["maxOpenTokens"]),
            "store_meter": meter(store_then["storeBytes"], store_then["storeCapBytes"]),
        }

    @cached_property
    def _context(self) -> tuple:
        try:
            return context_view(history_reads.context_of_block(self.agent, self.block)), None
        except (NotRecorded, history_reads.HistoryPruned) as refused:
            return None, refused

    @property
    def context(self) -> dict | None:
        return self._context[0]

    @property
    def context_refusal(self) -> DomainError | None:
        return self._context[1]

    @property
    def checkpoint(self):
        """The checkpoint block `number`'s first model call was given."""
        return self.block.checkpoint


class NameErrors(FirstErrorFocus):
    """What the studio refused about a new agent, shown next to its name
    when it is about the name, else next to `other_field`."""

    other_field: str | None = None

    def add_domain_error(self, error: DomainError) -> None:
        field = "name" if error.code in ("invalid_name", "name_taken") else self.other_field
        self.add_error(field, error.message)
        self._focus(field)


class ForkForm(NameErrors, forms.Form):
    name = forms.CharField(max_length=64, label="Name of the new agent")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, auto_id="fork-%s", **kwargs)


def fork_name(agent: Agent, number: int) -> str:
    """A name to offer for a fork of `agent` at block `number`."""
    suffix = f"-from-{number}"
    return agent.name[: 64 - len(suffix)] + suffix


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
        except JSONTooDeep:
            raise forms.ValidationError(f"This file is not an agent file: {TOO_DEEP}") from None
        except ValueError:
            raise forms.ValidationError(
                "This file is not JSON: an agent file is the JSON document an agent's Export downloads."
            ) from None
        try:
            return valid(AgentFile(data=document), code="invalid_agent_file").validated_data
        except DomainError as refused:
            raise forms.ValidationError(refused.message) from None
