"""What the Agents pages show, gathered from the domain: the config forms,
and the sections of an agent's page (each computed only when its template
asks for it, so a live fragment costs only its own queries)."""

from functools import cached_property

from django import forms
from django.conf import settings
from django.db.models import Q, Sum

from billing import ledger
from billing.models import CostLine
from memories import store
from memories.models import Memory
from studio.errors import DomainError
from studio.page_helpers import share, tone

from . import selectors, services
from .context import context_assemble, current_checkpoint
from .forms import CONFIG_FIELDS, ConfigChecks
from .models import LIVE_STATUSES, Agent, Block, Compaction, CompactionType, Turn, TurnStatus

HISTORY_PAGE_SIZE = 20
COMPACTIONS_SHOWN = 5
# Words that show a system prompt talks about memory at all (the agent's own
# memory names count too): the heuristic behind the prompting warning.
MEMORY_WORDS = ("memory", "memories")


# --- the config forms ----------------------------------------------------------------


class AgentConfigForm(ConfigChecks, forms.Form):
    """An agent's config as the page edits it; `definition()` is what
    `agent_define` takes. Numeric bounds are the API's."""

    system_prompt = forms.CharField(
        required=False, strip=False, max_length=200_000, widget=forms.Textarea(attrs={"rows": 10})
    )
    model = forms.CharField(max_length=200, initial="scripted")
    memory_enabled = forms.BooleanField(required=False, initial=True)
    max_open_tokens = forms.IntegerField(
        required=False, min_value=1, max_value=10_000_000, initial=services.DEFAULT_MAX_OPEN_TOKENS
    )
    compaction_type = forms.ChoiceField(choices=CompactionType.choices, initial=CompactionType.SUMMARIZE)
    max_tokens = forms.IntegerField(min_value=256, max_value=10_000_000, initial=services.DEFAULT_MAX_TOKENS)

    def __init__(self, *args, prefix_id: str = "config", **kwargs):
        super().__init__(*args, auto_id=f"{prefix_id}-%s", **kwargs)
        self.has_budget_error = False

    def _post_clean(self):
        # After a refused post the page opens on the first field in error
        # (the form may be far down the page).
        super()._post_clean()
        self._focus(next(iter(self.errors), None))

    def _focus(self, field: str | None) -> None:
        if field in self.fields and not any("autofocus" in f.widget.attrs for f in self.fields.values()):
            self.fields[field].widget.attrs["autofocus"] = True

    def clean_max_open_tokens(self):
        value = self.cleaned_data["max_open_tokens"]
        return services.DEFAULT_MAX_OPEN_TOKENS if value is None else value

    def add_domain_error(self, error: DomainError) -> None:
        """Show what `agent_define` refused next to the fields it is about."""
        if error.code == "invalid_name" and "name" in self.fields:
            self.add_error("name", error.message)
            self._focus("name")
            return
        if error.code == "invalid_definition":
            # The model was checked in clean_model, so this is the budget rule.
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
        super().__init__(*args, prefix_id="new", **kwargs)
        self.game = game

    def clean_name(self):
        name = super().clean_name()
        if Agent.objects.filter(game=self.game, name=name).exists():
            raise forms.ValidationError(f"There is already an agent named '{name}': change it on its page.")
        return name


def config_initial(agent: Agent) -> dict:
    return {field: getattr(agent, field) for field in CONFIG_FIELDS}


# --- the prompting heuristic -----------------------------------------------------------


def memory_words(agent: Agent | None) -> list[str]:
    """What a prompt that talks about memory would mention: the words
    themselves, and the names of the agent's memories."""
    names = list(Memory.objects.filter(agent=agent).values_list("name", flat=True)) if agent else []
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
        context = context_assemble(self.agent)
        tokens = context.tokens()
        budget = tokens["maxTokens"]
        return {
            "system": context.system,
            "context_block": context.context_block,
            "messages": context.messages,
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
        items = [self._block_view(block, lines) for block in page]
        first_folded = next((item for item in items if item["folded"]), None)
        if first_folded:
            first_folded["starts_folded"] = True
        return {
            "blocks": items,
            "older": page[-1].number if has_older else None,
            "is_newest": not self.before,
            "total": self.agent.last_block,
        }

    def _block_view(self, block: Block, lines: dict) -> dict:
        turn = block.turn
        return {
            **selectors.block_wire(block),
            "created": block.created_at,
            "turn": turn,
            "error": turn.error if turn else "",
            "cost": selectors.turn_cost(turn, lines.get(turn.uuid, [])) if turn else None,
            "can_cancel": block.status in LIVE_STATUSES and turn is not None,
        }

    @cached_property
    def waiting_turns(self) -> list[Turn]:
        """Live sends that have no block to show them: queued ones, and
        transient ones (which never get a block)."""
        return list(
            Turn.objects.filter(agent=self.agent, status__in=LIVE_STATUSES)
            .filter(Q(is_transient=True) | Q(status=TurnStatus.QUEUED))
            .order_by("id")
        )
