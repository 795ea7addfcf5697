"""Defining and deleting agents (reading them is `selectors`), and the
model a game's definitions get when they name none."""

import math
import re
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q

from agents.game_tools import tool_names, tools_check
from agents.models import (
    LIVE_REPLAY_STATUSES,
    Agent,
    AgentConfig,
    AgentRevision,
    Compaction,
    CompactionType,
    DefinedVia,
    Replay,
    Turn,
)
from agents.provenance import Definer, by_fields, provenance_text
from agents.providers import default_model, model_check, tool_tokens
from agents.selectors import agent_with_stats, revision_get, revisions_past
from agents.sending.turn_slot import live_head, open_calls_settle
from billing import ledger
from memories.models import Memory
from memories.tools import MEMORY_TOOLS
from studio.auth.throttles import definition_wait
from studio.errors import Conflict, DomainError, NotFound
from studio.models import Game
from studio.tokens import count_tokens

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_MAX_OPEN_TOKENS = 4000
DEFAULT_MAX_TOKENS = 32000


@dataclass(frozen=True)
class AgentDefinition:
    system_prompt: str = ""
    # None: the game's default model, resolved when the agent is defined.
    model: str | None = None
    memory_enabled: bool = False
    max_open_tokens: int = DEFAULT_MAX_OPEN_TOKENS
    compaction_type: str = CompactionType.SUMMARIZE
    max_tokens: int = DEFAULT_MAX_TOKENS
    # The game's tools (`agents.game_tools`), each a dict as kept.
    tools: tuple = ()
    # Not config (compare=False marks it so): which default gave the model
    # a definition did not name, for the words of a refusal.
    model_from: str | None = field(default=None, compare=False)


# `/agents/import` is the import route, so no agent may be called that.
RESERVED_NAMES = ("import",)


def agent_name_check(name: str) -> None:
    if not NAME_PATTERN.fullmatch(name):
        raise DomainError(
            f"'{name[:80]}' is not a valid agent name: use 1–64 characters from A–Z, a–z, 0–9, '_' and '-'.",
            code="invalid_name",
        )
    if name in RESERVED_NAMES:
        raise DomainError(
            f"'{name}' is not an agent name: /agents/{name} is the import route. Choose another name.",
            code="invalid_name",
        )


def model_usable_check(model: str, *, then: str = "define the agent again") -> None:
    """Refuse a model no provider serves, the `scripted` test model where it
    is not offered, and a model without a price row of its own (unless
    STUDIO_ALLOW_UNPRICED_MODELS lets the `*` row price it: every model, or
    those it names). `then` is what to do once it has a price."""
    model_check(model)
    if unpriced_model_allowed(model) or ledger.model_has_price(model):
        return
    raise DomainError(
        f"The model '{model}' has no price of its own, so its turns could not be billed at its "
        f"rates.{_priced_near(model)} Add a price for it in the Django admin at "
        f"/admin/billing/modelprice/ (credits per million tokens) and {then}, or have the operator list it in "
        "STUDIO_ALLOW_UNPRICED_MODELS (a comma-separated list of model names) to bill it at the '*' "
        "row's price.",
        code="invalid_definition",
    )


def _priced_near(model: str) -> str:
    """' Did you mean …?' naming the priced model `model` is likely a typo of, or ''."""
    near = ledger.model_priced_near(model)
    return f" Did you mean '{near}'? That one has a price." if near else ""


def unpriced_model_allowed(model: str) -> bool:
    allowed = settings.STUDIO["ALLOW_UNPRICED_MODELS"]
    return allowed is True or model in (allowed or ())


def definition_model_resolved(definition: AgentDefinition, *, game: Game) -> AgentDefinition:
    """`definition` with the model it runs on: its own, else the game's
    default (`providers.default_model`) — refused when there is none. Reads
    nothing from the database: `definition_check` checks the model."""
    if definition.model is not None:
        return definition
    model = default_model(game)
    if model is None:
        raise _model_refusal(
            "This definition names no model, and neither the game nor the studio has a default model. "
            "Name one ('openai:<model>' or 'anthropic:<model>'), or set the game's default (on its "
            "Agents page in the studio, or with PATCH /api/v1/game), or have the operator set "
            "STUDIO_DEFAULT_MODEL."
        )
    source = "the game's default" if game.default_model else "the studio's default"
    if not game.default_model and settings.STUDIO["DEFAULT_MODEL"]:
        source += " (STUDIO_DEFAULT_MODEL)"
    return replace(definition, model=model, model_from=source)


def definition_model_check(definition: AgentDefinition) -> None:
    """`model_usable_check` of the definition's model; the refusal of one
    a default gave says which default."""
    try:
        model_usable_check(definition.model)
    except DomainError as refused:
        if definition.model_from is None:
            raise
        raise _model_refusal(
            f"This definition names no model, so it gets {definition.model_from}, "
            f"'{definition.model}'. {refused.message}"
        ) from None


def _model_refusal(message: str) -> DomainError:
    return DomainError(message, code="invalid_definition", details=[{"field": "model", "message": message}])


def game_default_model_set(*, game: Game, model: str | None) -> Game:
    """Set the model the game's definitions get when they name none; None:
    the studio's default. Checked as a definition's model is. Agents keep
    the model they were defined with until they are defined again."""
    if model is not None:
        model_usable_check(model, then="set it as the game's default again")
    game.default_model = model or ""
    game.save(update_fields=["default_model"])
    return game


def max_open_tokens_allowed(max_tokens: int) -> int:
    """The largest maxOpenTokens below half of `max_tokens`."""
    return (max_tokens - 1) // 2


def definition_check(definition: AgentDefinition, *, system_tokens: int) -> None:
    """The definition-time rules: the model must be one this studio offers
    and prices; open memories must fit in less than half of the compaction
    budget, so they never crowd out recent history; and the system prompt,
    with the memory tools' definitions, must leave room beside them for a
    conversation."""
    definition_model_check(definition)
    open_budget = definition.max_open_tokens if definition.memory_enabled else 0
    names = [*(MEMORY_TOOLS if definition.memory_enabled else ()), *tool_names(definition.tools)]
    tools = tool_tokens(definition.model, names, definition.tools)
    if system_tokens + tools >= definition.max_tokens - open_budget:
        beside = f" less memory.maxOpenTokens ({open_budget:,})" if open_budget else ""
        which = "the tools'" if definition.tools else "the memory tools'"
        with_tools = f" and {which} definitions take {tools:,}" if tools else ""
        raise DomainError(
            f"The system prompt is {system_tokens:,} tokens{with_tools}, which leaves no room for a "
            f"conversation in compaction.maxTokens ({definition.max_tokens:,}){beside}. Shorten the "
            "prompt or raise compaction.maxTokens.",
            code="invalid_definition",
        )
    if not definition.memory_enabled:
        return
    max_open, max_tokens = definition.max_open_tokens, definition.max_tokens
    largest = max_open_tokens_allowed(max_tokens)
    if max_open > largest:
        raise DomainError(
            f"memory.maxOpenTokens ({max_open:,}) must be below half of compaction.maxTokens "
            f"({max_tokens:,}), so {largest:,} at most. Lower memory.maxOpenTokens to {largest:,} "
            f"or raise compaction.maxTokens to {max_open * 2 + 1:,}.",
            code="invalid_definition",
        )


def definition_fields(definition: AgentDefinition) -> dict:
    """The config fields of an agent (or a revision) as `definition` sets them."""
    return {
        "system_prompt": definition.system_prompt,
        "system_tokens": count_tokens(definition.system_prompt),
        "model": definition.model,
        "memory_enabled": definition.memory_enabled,
        "max_open_tokens": definition.max_open_tokens,
        "compaction_type": definition.compaction_type,
        "max_tokens": definition.max_tokens,
        "tools": list(definition.tools),
    }


def definition_from_config(config: dict) -> AgentDefinition:
    """The definition a config in its wire shape (a PUT body) makes."""
    memory, compaction = config.get("memory"), config.get("compaction") or {}
    return AgentDefinition(
        system_prompt=config.get("systemPrompt", ""),
        model=config.get("model"),
        memory_enabled=memory is not None,
        max_open_tokens=(memory or {}).get("maxOpenTokens", DEFAULT_MAX_OPEN_TOKENS),
        compaction_type=compaction.get("type", CompactionType.SUMMARIZE),
        max_tokens=compaction.get("maxTokens", DEFAULT_MAX_TOKENS),
        tools=tuple(tools_check(config.get("tools"))),
    )


def definition_of(config: AgentConfig) -> AgentDefinition:
    """The definition that sets `config` (an agent's, or one of its revisions)."""
    return AgentDefinition(
        system_prompt=config.system_prompt,
        model=config.model,
        memory_enabled=config.memory_enabled,
        max_open_tokens=config.max_open_tokens,
        compaction_type=config.compaction_type,
        max_tokens=config.max_tokens,
        tools=tuple(config.tools or ()),
    )


@dataclass(frozen=True)
class Defined:
    """What a definition made: the agent, whether it is new, its newest
    revision (None: not kept) and — when the definition changed nothing —
    its stats, read with it."""

    agent: Agent
    created: bool
    revision: AgentRevision | None
    stats: dict | None = None

    @property
    def is_unchanged(self) -> bool:
        return self.stats is not None


def agent_construct(
    *,
    game: Game,
    name: str,
    definition: AgentDefinition,
    by: Definer,
    via: DefinedVia,
    note: str = "",
    if_match: frozenset[str] | None = None,
) -> Defined:
    """Create the agent, or change the config of the one with this name —
    its history, checkpoint and memories are untouched. A config written
    is kept as the agent's next revision, with who defined it (`by`: a
    user, an API key, or None), from where (`via`) and `note`. Constructing
    it again with the config it has writes nothing (no revision, no update:
    the spec has game code construct its agents at the top of every event
    handler) and reads one statement, the agent with its stats.

    `if_match`: the revisions (as ETag values, `revision_etag` without its
    quotes) the definer last read; when the agent is at another one — or
    there is none — and the definition would change it, 412
    `definition_changed`, and nothing is written. None: define whatever it
    is at."""
    agent_name_check(name)
    definition = definition_model_resolved(definition, game=game)
    fields = definition_fields(definition)
    found = agent_with_stats(game=game, name=name)
    if found is not None and all(getattr(found.agent, key) == value for key, value in fields.items()):
        # Whatever `if_match` names: the agent already has this config, so the
        # change asked for is in place (RFC 9110 13.1.1 allows a 2xx then) —
        # and a definition retried after its answer was lost is not refused
        # for its own first write.
        return Defined(found.agent, False, found.revision, found.stats)
    definition_check(definition, system_tokens=fields["system_tokens"])
    definition_paced(game)
    record = {**by_fields(by), "via": via, "note": note[:300]}
    try:
        agent, created, revision = _define(game, name, fields, record=record, if_match=if_match)
    except IntegrityError:
        # Two first definitions raced: the other one created it; update it.
        agent, created, revision = _define(game, name, fields, record=record, if_match=if_match)
    return Defined(agent, created, revision)


def revision_etag(number: int) -> str:
    """The ETag naming revision `number` of an agent's config (strong, quoted)."""
    return f'"{number}"'


def definition_current_check(agent: Agent | None, *, name: str, if_match: frozenset[str] | None) -> None:
    """412 `definition_changed` when `if_match` names no revision `agent`
    is at (or there is no such agent): someone defined it since the
    definer last read it. The message says who, from where and when."""
    if if_match is None or (agent is not None and str(agent.revision) in if_match):
        return
    named = ", ".join(sorted(f'"{tag[:20]}"' for tag in if_match)[:3]) or "no revision"
    if agent is None:
        raise DomainError(
            f"There is no agent named '{name}' in this game (it may have been deleted), so If-Match "
            f"({named}) names none of its revisions. Leave If-Match out to create it.",
            status=412,
            code="definition_changed",
        )
    raise DomainError(
        f"Agent '{name}' was defined again since you read it: {revision_now(agent)}, and If-Match "
        f"names {named}. Read it again (GET /api/v1/agents/{name} answers its ETag) and send your "
        "definition with that If-Match — or leave If-Match out to replace whatever it is.",
        status=412,
        code="definition_changed",
    )


def revision_now(agent: Agent) -> str:
    """The revision `agent` is at, who defined it and when, in words: "it is
    at revision 3 (defined by game code — key `server` at 2026-12-03 10:00:00 UTC)"."""
    newest = AgentRevision.objects.filter(agent=agent, number=agent.revision).first()
    when = f" at {newest.created_at:%Y-%m-%d %H:%M:%S} UTC" if newest else ""
    who = provenance_text(newest)
    return f"it is at revision {agent.revision} ({who[:1].lower()}{who[1:]}{when})"


def revision_restore(*, agent: Agent, number: int, by: Definer, via: DefinedVia, current: int) -> Defined:
    """Define `agent` again with the config of its revision `number`, kept
    as a new revision ("Restored revision 3") — by the same rules as any
    definition. `current`: the revision the restorer saw the agent at; if
    it has been defined since, 412 `definition_changed` and nothing changes."""
    replay_copy_check(agent, then="Restore a revision of the agent it replays instead.")
    revision = revision_get(agent=agent, number=number)
    return agent_construct(
        game=agent.game,
        name=agent.name,
        definition=definition_of(revision),
        by=by,
        via=via,
        note=f"Restored revision {number}",
        if_match=frozenset({str(current)}),
    )


def definition_paced(game: Game, *, doing: str = "defining agents") -> None:
    """429 `rate_limited` past STUDIO_DEFINITION_RATE: a game's definitions
    that write a config revision — a new agent, a changed config, a fork,
    an import, a replay's copy — are paced as sends are, so no game fills
    the database with them. One that changes nothing writes nothing and is
    not counted: game code may define its agents on every event. `doing`:
    what the game is doing too fast, in the refusal's words."""
    wait = definition_wait(game.pk)
    if wait is None:
        return
    seconds = math.ceil(wait)
    raise DomainError(
        f"The game '{game.slug}' is {doing} faster than the studio allows (STUDIO_DEFINITION_RATE, which "
        "paces a game's definitions, forks, imports and replays together); "
        f"try again in {seconds} s. A definition that changes nothing is never refused.",
        status=429,
        code="rate_limited",
        retry_after=seconds,
    )


def agent_define(
    *,
    game: Game,
    name: str,
    definition: AgentDefinition,
    by: Definer,
    via: DefinedVia,
    note: str = "",
    if_match: frozenset[str] | None = None,
) -> tuple[Agent, bool]:
    """`agent_construct`, for callers that need the agent and whether it was created."""
    defined = agent_construct(
        game=game, name=name, definition=definition, by=by, via=via, note=note, if_match=if_match
    )
    return defined.agent, defined.created


def agent_room_check(game: Game, *, lock: bool = True, for_replay: bool = False) -> None:
    """403 `quota_exceeded` when the game has STUDIO_MAX_AGENTS_PER_GAME
    agents already (a fork and an import count as new agents, and so does
    a replay's copy while it lives — `for_replay`: the copy is the new
    one). Locks the game's row until the caller's transaction ends, so two
    new agents at once cannot both take the last place — or, without
    `lock`, is only the early answer that spares an import or a replay
    reading a history."""
    if lock:
        Game.objects.select_for_update(no_key=True).filter(pk=game.pk).values_list("pk").first()
    most = settings.STUDIO["MAX_AGENTS_PER_GAME"]
    if Agent.objects.filter(game=game).count() >= most:
        copy = (
            "A replay plays with a copy of its agent, which takes a place while the replay lives: "
            if for_replay
            else ""
        )
        raise DomainError(
            f"The game '{game.slug}' has {most} agents (its live replays' copies among them), the most a "
            f"game may have (STUDIO_MAX_AGENTS_PER_GAME). {copy}Delete an agent, or wait for a replay to "
            "end, or ask the studio's operators for more.",
            status=403,
            code="quota_exceeded",
        )


def _define(
    game: Game, name: str, fields: dict, *, record: dict, if_match
) -> tuple[Agent, bool, AgentRevision]:
    """Write the config, and keep it as the agent's next revision with
    `record` (who defined it, from where: `provenance.by_fields`, `via`, `note`)."""
    with transaction.atomic():
        if if_match is not None:
            # Under the row's lock: no definition can come between the check and the write.
            current = Agent.objects.select_for_update().filter(game=game, name=name).first()
            definition_current_check(current, name=name, if_match=if_match)
        if not Agent.objects.filter(game=game, name=name).exists():
            agent_room_check(game)
        # update_or_create locks the row, so a redefinition racing a turn
        # waits for the turn's short transactions rather than interleaving.
        agent, created = Agent.objects.update_or_create(
            game=game,
            name=name,
            defaults={**fields, "revision": F("revision") + 1},
            create_defaults={**fields, "revision": 1},
        )
        if not created:
            _stranded_check(agent, fields)
            agent.refresh_from_db(fields=["revision"])  # the F() above, as written
        revision = AgentRevision.objects.create(agent=agent, number=agent.revision, **fields, **record)
        if not created:  # a new agent has the one revision just written
            revisions_bound(agent.pk)
    return agent, created, revision


def revisions_bound(agent_id: int) -> None:
    """Delete the agent's revisions past keeping (`selectors.revisions_past`:
    beyond its newest STUDIO_KEEP_REVISIONS, but those a block or a running
    turn refers to) as soon as it writes one, so a game redefining an agent
    with long prompts grows it by no more than that between prunes. Under
    the agent's row lock (the caller's): its writes of revisions queue."""
    keep = settings.STUDIO["KEEP_REVISIONS"]
    if keep and AgentRevision.objects.filter(agent_id=agent_id).count() > keep:
        revisions_past(agent_id, keep).delete()


def _stranded_check(agent: Agent, fields: dict) -> None:
    """No memory may be left larger than the whole open budget: it could
    never be opened again, so never read, written or deleted. Under the
    agent's lock (its row, which every memory write takes first)."""
    if not fields["memory_enabled"]:
        return  # off: nothing is offered, nothing stranded; the check comes when memory is on again
    budget = fields["max_open_tokens"]
    largest = Memory.objects.filter(agent=agent, tokens__gt=budget).order_by("-tokens").first()
    if largest is not None:
        raise DomainError(
            f"memory.maxOpenTokens ({budget:,}) is below the size of memory '{largest.name}' "
            f"({largest.tokens:,} tokens), which could then never be opened again — so never read, "
            f"written or deleted. Keep memory.maxOpenTokens at {largest.tokens:,} or more; or, before "
            "lowering it, have the agent open that memory and close it shorter, or delete it.",
            code="invalid_definition",
        )


def replay_copy_check(agent: Agent, *, then: str) -> None:
    """409 `replay_copy` for a replay's copy (`Agent.replay_of`): it plays
    only its replay's messages, and is kept to be looked at. `then`: what
    to do instead."""
    if agent.replay_of_id is not None:
        raise Conflict(
            f"Agent '{agent.name}' is a replay's copy: it plays only the replay's messages and is kept to "
            f"be looked at. {then}",
            code="replay_copy",
        )


def agent_delete(*, agent: Agent) -> None:
    """Remove the agent with everything it owns (its replays and their
    copies too) — but not while one of its turns or replays is live, or a
    model call of its or its copies' is still to be charged (a cancelled
    turn's, a compaction's). Turns whose process died are ended first,
    giving their holds back (the cost lines of its game stay in the
    ledger). A replay's copy goes with its replay (when it ends, or is
    deleted) or the agent it replays, not on its own."""
    replay_copy_check(agent, then="It goes once its replay ends, or with the agent it replays.")
    open_calls_settle(game_id=agent.game_id)
    with transaction.atomic():
        locked = Agent.objects.select_for_update().select_related("game").filter(pk=agent.pk).first()
        if locked is None:
            raise NotFound(f"There is no agent named '{agent.name}' in this game.", code="agent_not_found")
        if live_head(locked) is not None:
            raise Conflict(
                f"Agent '{agent.name}' has a turn in progress; cancel it or wait for it to end, "
                "then delete the agent.",
                code="agent_busy",
            )
        if Replay.objects.filter(agent=locked, status__in=LIVE_REPLAY_STATUSES).exists():
            raise Conflict(
                f"Agent '{agent.name}' has a replay running; cancel it or wait for it to end, then delete "
                "the agent.",
                code="agent_busy",
            )
        own = Q(agent=locked) | Q(agent__replay_of=locked)
        calling = Turn.objects.filter(own, open_call_tokens__isnull=False).exists()
        if calling or Compaction.objects.filter(own, held__gt=0).exists():
            raise Conflict(
                f"Agent '{agent.name}' has a model call still running (a cancelled turn's or a "
                "compaction's) that is yet to be charged; try again in a minute.",
                code="agent_busy",
            )
        locked.delete()
