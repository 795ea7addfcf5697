"""Reads: an agent, its stats, a turn's cost and tool calls, and the wire
shapes the API, the pages and the events show them in — built in one place.
A wire shape reads nothing itself unless it is not given what it shows."""

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Max, OuterRef, Q, Subquery, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from agents.history import as_of
from agents.history.diffs import DiffBudget, lines_diff
from agents.models import (
    NUMBER_MAX,
    Agent,
    AgentRevision,
    Block,
    Checkpoint,
    Compaction,
    Replay,
    Turn,
    TurnStatus,
    blocks_fill_running,
)
from agents.providers import model_check
from agents.wire import (
    agent_wire,
    block_wire,
    compaction_wire,
    memory_compared,
    replay_row,
    replay_wire,
    revision_wire,
    turns_wire,
)
from billing import ledger
from billing.models import CostLine, ModelPrice
from memories.models import Memory
from studio.errors import Conflict, DomainError, NotFound
from studio.http.lists import Keyset, Page, each
from studio.http.params import uuid_of
from studio.models import Game
from studio.runtime import sql

# --- agents ----------------------------------------------------------------------------


# Every name an agent can have: a definition's (services.NAME_PATTERN), or a
# replay copy's, marked with '~'. A name of any other form names no agent
# and is not looked up (PostgreSQL refuses a NUL in text outright).
AGENT_NAME_FORM = re.compile(r"[A-Za-z0-9_~-]{1,64}")


def agent_name_is_possible(name: str) -> bool:
    return AGENT_NAME_FORM.fullmatch(name) is not None


def agent_get(*, game: Game, name: str) -> Agent:
    """The game's agent `name` (with `game` as its game): read on every
    request about an agent, so written out (studio/runtime/sql.py says why)."""
    if not agent_name_is_possible(name):
        raise no_such_agent(name)
    # Speed: ORM statement building (studio/runtime/sql.py); guarded by bench/agent_server.py (server CPU per message).
    agent = sql.first(Agent, {"game": game.pk, "name": name})
    if agent is None:
        raise no_such_agent(name)
    agent.game = game
    return agent


def game_agents(game: Game):
    """The game's characters: its agents but for replays' copies
    (`Agent.replay_of`), which its list and its count leave out (its agent
    quota counts a copy while its replay lives: `services.agent_room_check`)."""
    return Agent.objects.filter(game=game, replay_of=None)


def agent_origin(agent: Agent) -> dict | None:
    """What the agent was made as, when it is no ordinary character:
    {"kind": "copy", "of", "fromBlock", "through", "replay"} for a replay's
    copy, {"kind": "fork", "of", "block", "exists"} for a fork (`exists`:
    the agent it was forked from is still in the game by that name); None
    otherwise."""
    if agent.replay_of_id is not None:
        replay = Replay.objects.filter(replay_agent=agent).select_related("agent").first()
        if replay is None:  # its replay is going (its copy with it)
            return None
        return {
            "kind": "copy",
            "of": replay.agent.name,
            "fromBlock": replay.from_block,
            "through": replay.through_block,
            "replay": replay.uuid,
        }
    if agent.forked_from:
        exists = Agent.objects.filter(game_id=agent.game_id, name=agent.forked_from, replay_of=None).exists()
        return {"kind": "fork", "of": agent.forked_from, "block": agent.forked_at_block, "exists": exists}
    return None


def no_such_agent(name: str) -> NotFound:
    return NotFound(f"There is no agent named '{name[:80]}' in this game.", code="agent_not_found")


def agent_stats(agent: Agent) -> dict:
    return agents_stats([agent])[agent.pk]


@dataclass(frozen=True)
class AgentRead:
    agent: Agent
    stats: dict
    # Its newest revision (who defined it, from where, when); None: not kept.
    revision: AgentRevision | None


# What of the newest revision an agent's read takes with it.
REVISION_RECORD = ("via", "by_name", "by_key", "note", "created_at")


def _agent_with_stats_read(game_id, name):
    newest = Checkpoint.objects.filter(agent=OuterRef("pk")).order_by("-id")
    through = Subquery(
        Checkpoint.objects.filter(agent=OuterRef(OuterRef("pk"))).order_by("-id").values("through_block")[:1]
    )
    verbatim = (
        Block.objects.filter(agent=OuterRef("pk"), folded=False, number__gt=Coalesce(through, 0))
        .exclude(status=TurnStatus.RUNNING)
        .order_by()
        .values("agent")
        .annotate(total=Sum("tokens"))
        .values("total")
    )
    store = Memory.objects.filter(agent=OuterRef("pk")).order_by().values("agent")
    newest_revision = AgentRevision.objects.filter(agent=OuterRef("pk"), number=OuterRef("revision"))
    return (
        Agent.objects.filter(game=game_id, name=name)
        .annotate(
            **{f"revision_{key}": Subquery(newest_revision.values(key)[:1]) for key in REVISION_RECORD},
            checkpoint_kind=Subquery(newest.values("kind")[:1]),
            checkpoint_through=Subquery(newest.values("through_block")[:1]),
            checkpoint_at=Subquery(newest.values("created_at")[:1]),
            verbatim_tokens=Subquery(verbatim),
            store_bytes=Subquery(store.annotate(total=Sum("bytes")).values("total")),
            open_tokens=Subquery(store.filter(is_open=True).annotate(total=Sum("tokens")).values("total")),
        )
        .order_by("pk")[:1]
    )


# Speed: the ORM built and compiled this statement in ~11 ms of CPU a read, run in ~1; guarded by bench/define.py.
_AGENT_WITH_STATS = sql.Compiled(_agent_with_stats_read, game_id=-0x5EED_0001, name="\x00agent-name")


def agent_with_stats(*, game: Game, name: str) -> AgentRead | None:
    """The game's agent `name`, its stats (as `agents_stats` gives them)
    and its newest revision's record, in one statement: what a
    redefinition that changes nothing reads — on every event, as game code
    constructs its agents."""
    if not agent_name_is_possible(name):
        return None
    found = _AGENT_WITH_STATS.first(game_id=game.pk, name=name)
    if found is None:
        return None
    found.game = game
    stats = {
        "blocks": found.last_block,
        "verbatimTokens": found.verbatim_tokens or 0,
        "openTokens": found.open_tokens or 0,
        "storeBytes": found.store_bytes or 0,
        "lastCheckpoint": (
            {
                "kind": found.checkpoint_kind,
                "throughBlock": found.checkpoint_through,
                "createdAt": found.checkpoint_at.isoformat(),
            }
            if found.checkpoint_kind
            else None
        ),
    }
    return AgentRead(found, stats, _revision_read(found))


def _revision_read(agent: Agent) -> AgentRevision | None:
    """The newest revision's record `agent_with_stats` read with the agent."""
    if agent.revision_via is None:
        return None
    record = {key: getattr(agent, f"revision_{key}") for key in REVISION_RECORD}
    return AgentRevision(agent=agent, number=agent.revision, **record)


def revision_latest(agent: Agent) -> AgentRevision | None:
    """The agent's newest revision (None: not kept)."""
    return AgentRevision.objects.filter(agent=agent, number=agent.revision).first()


def revisions_latest(agents: list[Agent]) -> dict[int, AgentRevision]:
    """Each agent's newest revision by its id, in one query (without configs)."""
    if not agents:
        return {}
    newest = Q()
    for agent in agents:
        newest |= Q(agent_id=agent.pk, number=agent.revision)
    rows = AgentRevision.objects.filter(newest).only("agent_id", "number", *REVISION_RECORD)
    return {revision.agent_id: revision for revision in rows}


REVISIONS = Keyset("revisions", order="-number", default_limit=100)


def revisions_page(*, agent: Agent, after: int | None, limit: int) -> Page:
    """The agent's kept revisions, newest first, each with who defined it."""
    rows = AgentRevision.objects.filter(agent=agent).only("agent_id", "number", *REVISION_RECORD)
    return REVISIONS.page(rows, after=after, limit=limit, wire=each(revision_wire))


def revision_get(*, agent: Agent, number: int) -> AgentRevision:
    """Revision `number` of the agent's config; 404 `revision_not_found`."""
    revision = (
        AgentRevision.objects.filter(agent=agent, number=number).first() if number <= NUMBER_MAX else None
    )
    if revision is None:
        raise no_such_revision(agent, number)
    return revision


def no_such_revision(agent: Agent, number) -> NotFound:
    return NotFound(
        f"Agent '{agent.name}' has no revision '{str(number)[:20]}' kept: its revisions are numbered 1 to "
        f"{agent.revision} (older ones may have been pruned: STUDIO_KEEP_REVISIONS).",
        code="revision_not_found",
    )


def agents_stats(agents: list[Agent]) -> dict[int, dict]:
    """Each agent's stats by its id, in three queries however many agents:
    their checkpoints in force, their verbatim blocks, their memories."""
    if not agents:
        return {}
    ids = [agent.pk for agent in agents]
    checkpoints = _checkpoints_in_force(ids)
    verbatim = _verbatim_tokens(ids, checkpoints)
    stores = _store_totals(ids)
    stats = {}
    for agent in agents:
        checkpoint = checkpoints.get(agent.pk)
        stats[agent.pk] = {
            "blocks": agent.last_block,
            "verbatimTokens": verbatim.get(agent.pk) or 0,
            **stores.get(agent.pk, EMPTY_STORE),
            "lastCheckpoint": (
                {
                    "kind": checkpoint.kind,
                    "throughBlock": checkpoint.through_block,
                    "createdAt": checkpoint.created_at.isoformat(),
                }
                if checkpoint
                else None
            ),
        }
    return stats


EMPTY_STORE = {"openTokens": 0, "storeBytes": 0}


def _store_totals(agent_ids: list[int]) -> dict[int, dict]:
    """Each agent's open tokens and store bytes, for agents with memories."""
    rows = (
        Memory.objects.filter(agent_id__in=agent_ids)
        .values("agent_id")
        .annotate(store_bytes=Sum("bytes"), open_tokens=Sum("tokens", filter=Q(is_open=True)))
    )
    return {
        row["agent_id"]: {"openTokens": row["open_tokens"] or 0, "storeBytes": row["store_bytes"]}
        for row in rows
    }


def store_totals(agent: Agent) -> dict:
    """`openTokens` and `storeBytes` of the agent's whole store."""
    return _store_totals([agent.pk]).get(agent.pk, EMPTY_STORE)


def _checkpoints_in_force(agent_ids: list[int]) -> dict[int, Checkpoint]:
    """The newest checkpoint of each agent that has one."""
    newest = Checkpoint.objects.filter(agent_id__in=agent_ids).values("agent_id").annotate(newest=Max("id"))
    rows = Checkpoint.objects.filter(id__in=newest.values("newest")).only(
        "agent_id", "kind", "through_block", "created_at"
    )
    return {checkpoint.agent_id: checkpoint for checkpoint in rows}


def _verbatim_tokens(agent_ids: list[int], checkpoints: dict[int, Checkpoint]) -> dict[int, int]:
    """Tokens of each agent's ended, unfolded blocks after its checkpoint."""
    after_checkpoint = Q()
    for agent_id in agent_ids:
        checkpoint = checkpoints.get(agent_id)
        after_checkpoint |= Q(agent_id=agent_id, number__gt=checkpoint.through_block if checkpoint else 0)
    rows = (
        Block.objects.filter(after_checkpoint, folded=False)
        .exclude(status=TurnStatus.RUNNING)
        .values("agent_id")
        .annotate(tokens=Sum("tokens"))
    )
    return {row["agent_id"]: row["tokens"] for row in rows}


def models_offered() -> list[str]:
    """The models a definition may name as things stand: each with a price
    of its own that a provider serves (`scripted` only where it is offered)."""
    offered = []
    for model in ModelPrice.objects.exclude(model="*").order_by("model").values_list("model", flat=True):
        try:
            model_check(model)
        except DomainError:
            continue
        offered.append(model)
    return offered


# --- turns ---------------------------------------------------------------------------


def turn_get(*, agent: Agent, turn_id) -> Turn:
    """One of the agent's turns by its id (a UUID, or the text of one as the studio writes it)."""
    key = turn_id if isinstance(turn_id, uuid.UUID) else uuid_of(str(turn_id))
    turn = Turn.objects.filter(agent=agent, uuid=key).first() if key else None
    if turn is None:
        raise NotFound(f"Agent '{agent.name}' has no turn '{str(turn_id)[:80]}'.", code="turn_not_found")
    return turn


# --- config revisions ---------------------------------------------------------------------

# A revision made this long before a running turn started may still be
# the one it was given (web processes' clocks differ a little): kept.
CLOCKS_APART = timedelta(minutes=1)


def revisions_past(agent_id: int, keep: int):
    """The agent's revisions older than its newest `keep` (at least 1)
    that no block was played with, nor made since before its oldest
    running turn started: that turn's block records the revision it was
    given only when it ends. What `manage.py prune` deletes, and what a
    definition deletes as it writes a revision."""
    numbers = (
        AgentRevision.objects.filter(agent_id=agent_id).order_by("-number").values_list("number", flat=True)
    )
    oldest_kept = numbers[keep - 1]
    played = Block.objects.filter(agent_id=agent_id).exclude(revision=None).values_list("revision", flat=True)
    rows = AgentRevision.objects.filter(agent_id=agent_id, number__lt=oldest_kept).exclude(
        number__in=set(played.distinct())
    )
    started = (
        Turn.objects.filter(agent_id=agent_id, status__in=(TurnStatus.RUNNING, TurnStatus.WAITING))
        .order_by("started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    if started is not None:
        given = numbers.filter(created_at__lte=started - CLOCKS_APART).first()
        rows = rows.filter(number__lt=given or 0)
    return rows


# --- lists ---------------------------------------------------------------------------
# How each list of the API is ordered and paged (studio.http.lists), and its pages
# in their wire shapes.

AGENTS = Keyset("agents", order="name", default_limit=1000, key_type=str)
TURNS = Keyset("turns", order="-id", default_limit=20)
HISTORY = Keyset("blocks", order="number", default_limit=50)
COMPACTIONS = Keyset("compactions", order="-id", default_limit=20)
REPLAYS = Keyset("replays", order="-id", default_limit=20)


def agents_page(*, game: Game, after: str | None, limit: int) -> Page:
    """The game's agents by name, each with its newest revision's record."""

    def wire(agents: list[Agent]) -> list[dict]:
        revisions = revisions_latest(agents)
        return [agent_wire(agent, revision=revisions.get(agent.pk)) for agent in agents]

    return AGENTS.page(game_agents(game), after=after, limit=limit, wire=wire)


def turns_page(
    *,
    agent: Agent,
    status: str | None = None,
    idempotency_key: str | None = None,
    after: int | None,
    limit: int,
) -> Page:
    """The agent's turns, newest first; only those in `status` when given,
    and only the send's under `idempotency_key` (one at most) when given —
    how game code finds a send whose answer it never got."""
    turns = Turn.objects.filter(agent=agent)
    if status:
        turns = turns.filter(status=status)
    if idempotency_key is not None:
        turns = turns.filter(idempotency_key=idempotency_key)
    return TURNS.page(turns, after=after, limit=limit, wire=turns_wire)


def blocks_page(*, agent: Agent, after: int | None, limit: int) -> Page:
    """The agent's blocks in order, folded ones included."""
    blocks = Block.objects.filter(agent=agent).select_related("turn")

    def wire(page: list[Block]) -> list[dict]:
        return [block_wire(block) for block in blocks_fill_running(page)]

    return HISTORY.page(blocks, after=after, limit=limit, wire=wire)


def compactions_page(*, agent: Agent, after: int | None, limit: int) -> Page:
    """The agent's compactions, newest first."""
    items = Compaction.objects.filter(agent=agent).select_related("checkpoint")
    return COMPACTIONS.page(items, after=after, limit=limit, wire=each(compaction_wire))


def replays_page(*, agent: Agent, after: int | None, limit: int) -> Page:
    """The agent's replays, newest first."""
    items = Replay.objects.filter(agent=agent).defer("kept").annotate(kept_cost=KT("kept__cost"))

    def wire(replays: list[Replay]) -> list[dict]:
        costs = replay_costs(agent, [replay for replay in replays if replay.kept_cost is None])
        for replay in replays:
            replay.agent = agent
        return [
            replay_wire(
                replay,
                cost=costs.get(replay.replay_agent_name, 0)
                if replay.kept_cost is None
                else _cost(replay.kept_cost),
            )
            for replay in replays
        ]

    return REPLAYS.page(items, after=after, limit=limit, wire=wire)


# --- replays -------------------------------------------------------------------------------


def replay_get(*, agent: Agent, replay_id) -> Replay:
    """One of the agent's replays by its id (a UUID, or the text of one as the studio writes it)."""
    key = replay_id if isinstance(replay_id, uuid.UUID) else uuid_of(str(replay_id))
    replay = (
        Replay.objects.filter(agent=agent, uuid=key).select_related("replay_agent").first() if key else None
    )
    if replay is None:
        raise NotFound(
            f"Agent '{agent.name}' has no replay '{str(replay_id)[:80]}'.", code="replay_not_found"
        )
    replay.agent = agent
    if replay.replay_agent is not None:
        replay.replay_agent.game = agent.game
    return replay


def replay_costs(agent: Agent, replays: list[Replay]) -> dict:
    """What each replay's copy was charged, by the copy's name (each
    copy's name is its own: its cost lines carry it)."""
    names = [replay.replay_agent_name for replay in replays]
    rows = (
        CostLine.objects.filter(game_id=agent.game_id, agent_name__in=names)
        .values("agent_name")
        .annotate(total=Sum("amount"))
    )
    return {row["agent_name"]: row["total"] for row in rows}


def replay_detail(replay: Replay, *, memories_at: int | None = None) -> dict:
    """A replay whole: a row per block, the original's and the replay's
    side by side; and the two stores compared, memory by memory, as the
    last block played left them — or, with `memories_at`, as block
    `memories_at` did (one of the blocks played, or the one before them;
    once its copy is removed, the replay keeps its store as the last
    block played left it only)."""
    with as_of.one_moment():
        _replay_now(replay)
        return _replay_detail(replay, memories_at)


def _replay_now(replay: Replay) -> None:
    """The replay as it stands, in the moment every read after it sees:
    it plays on elsewhere, and its copy may have gone since it was read."""
    now = Replay.objects.filter(pk=replay.pk).values(*REPLAY_MOVES).first()
    if now is None:
        raise NotFound(f"Agent '{replay.agent.name}' has no replay '{replay.uuid}'.", code="replay_not_found")
    for name, value in now.items():
        setattr(replay, name, value)  # a new replay_agent_id drops the copy read with it


# What changes of a replay while it plays and once it has ended.
REPLAY_MOVES = (
    "status",
    "played",
    "error",
    "error_code",
    "started_at",
    "ended_at",
    "replay_agent_id",
    "kept",
)


def _replay_detail(replay: Replay, memories_at: int | None) -> dict:
    played_through = replay.from_block - 1 + replay.played
    if memories_at is not None:
        _memories_at_check(replay, memories_at, played_through)
    numbers = (replay.from_block, replay.through_block)
    original = {
        b.number: b
        for b in Block.objects.filter(agent=replay.agent, number__range=numbers).select_related("turn")
    }
    replayed = {}
    if replay.kept is None:
        blocks = Block.objects.filter(agent=replay.replay_agent, number__range=numbers).select_related("turn")
        replayed = {b.number: b for b in blocks}
    lines = ledger.lines_by_turn(b.turn.uuid for b in [*original.values(), *replayed.values()] if b.turn)
    kept = replay.kept["rows"] if replay.kept is not None else {}
    rows = [
        replay_row(number, original.get(number), replayed.get(number), lines, kept=kept.get(str(number)))
        for number in range(replay.from_block, replay.through_block + 1)
    ]
    at = played_through if memories_at is None else memories_at
    try:
        memories, refused = stores_compared(replay, at), None
    except DomainError as refusal:
        if memories_at is not None:
            raise
        memories, refused = None, refusal.message
    return {
        **replay_wire(replay, cost=replay_cost(replay)),
        "rows": rows,
        "memories": memories,
        "memoriesRefused": refused,
    }


def replay_cost(replay: Replay):
    """What the replay's copy was charged: as the replay kept it once the
    copy went (its cost lines may be pruned later), else from its lines."""
    if replay.kept is not None:
        return _cost(replay.kept["cost"])
    return replay_costs(replay.agent, [replay]).get(replay.replay_agent_name, 0)


def _cost(text: str | None):
    return None if text is None else ledger.credits(text)


def _memories_at_check(replay: Replay, number: int, played_through: int) -> None:
    first = replay.from_block - 1
    if replay.kept is not None and number != played_through:
        message = (
            f"must be {played_through}: the replay has ended and its copy is gone, and it keeps the "
            "stores compared as its last block played left them only."
        )
    elif not first <= number <= played_through:
        message = (
            f"must be a block from {first} to {played_through}: the replay's start or a block it played."
        )
    else:
        return
    raise DomainError(f"memoriesAt: {message}", details=[{"field": "memoriesAt", "message": message}])


def replay_store(replay: Replay, number: int) -> list[Memory]:
    """The replay's store as block `number` left it: its copy's, or once
    the copy is gone, the one the replay kept (its last block played's) —
    or, when it played none and so kept none, the original's then, which
    the copy was copied from."""
    if replay.kept is None:
        return as_of.store_at(replay.replay_agent, number)
    refused = replay.kept["storeRefused"]
    if refused is not None:
        raise Conflict(refused["message"], code=refused["code"])
    if replay.kept["store"] is None:
        return as_of.store_at(replay.agent, number)
    return [as_of.baseline_memory(entry) for entry in replay.kept["store"]]


def stores_compared(replay: Replay, number: int) -> dict:
    """The original's store and the replay's as block `number` left them,
    memory by memory (the original's order, then the replay's own)."""
    original = {memory.name: memory for memory in as_of.store_at(replay.agent, number)}
    replayed = {memory.name: memory for memory in replay_store(replay, number)}
    budget = DiffBudget()
    compared = []
    for name in [*original, *(name for name in replayed if name not in original)]:
        before, after = original.get(name), replayed.get(name)
        differ = before is not None and after is not None and before.content != after.content
        lines = lines_diff(before.content, after.content, budget) if differ else []
        compared.append(memory_compared(name, before, after, lines))
    return {
        "atBlock": number,
        "same": all(item["change"] == "same" for item in compared),
        "memories": compared,
    }
