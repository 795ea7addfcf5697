"""Reads: an agent, its stats, a turn's cost and tool calls, and the wire
shapes the API, the pages and the events show them in — built in one place.
A wire shape reads nothing itself unless it is not given what it shows."""

import uuid
from dataclasses import dataclass

from django.db.models import Max, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce

from agents.models import Agent, Block, Checkpoint, Compaction, Turn, TurnStatus
from agents.wire import agent_wire, block_wire, compaction_wire, turns_wire
from memories.models import Memory
from studio import sql
from studio.errors import NotFound
from studio.lists import Keyset, Page, each
from studio.models import Game

# --- agents ----------------------------------------------------------------------------


def agent_get(*, game: Game, name: str) -> Agent:
    """The game's agent `name` (with `game` as its game): read on every
    request about an agent, so written out (studio/sql.py says why)."""
    # Speed: ORM statement building (studio/sql.py); guarded by bench/agent_server.py (server CPU per message).
    agent = sql.first(Agent, {"game": game.pk, "name": name})
    if agent is None:
        raise no_such_agent(name)
    agent.game = game
    return agent


def no_such_agent(name: str) -> NotFound:
    return NotFound(f"There is no agent named '{name[:80]}' in this game.", code="agent_not_found")


def agent_stats(agent: Agent) -> dict:
    return agents_stats([agent])[agent.pk]


@dataclass(frozen=True)
class AgentRead:
    agent: Agent
    stats: dict


def agent_with_stats(*, game: Game, name: str) -> AgentRead | None:
    """The game's agent `name` and its stats (as `agents_stats` gives them),
    in one statement: what a redefinition that changes nothing reads."""
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
    found = (
        Agent.objects.filter(game=game, name=name)
        .annotate(
            checkpoint_kind=Subquery(newest.values("kind")[:1]),
            checkpoint_through=Subquery(newest.values("through_block")[:1]),
            checkpoint_at=Subquery(newest.values("created_at")[:1]),
            verbatim_tokens=Subquery(verbatim),
            store_bytes=Subquery(store.annotate(total=Sum("bytes")).values("total")),
            open_tokens=Subquery(store.filter(is_open=True).annotate(total=Sum("tokens")).values("total")),
        )
        .first()
    )
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
    return AgentRead(found, stats)


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


# --- turns ---------------------------------------------------------------------------


def turn_get(*, agent: Agent, turn_id) -> Turn:
    """One of the agent's turns by its id (a UUID, or the text of one)."""
    try:
        key = turn_id if isinstance(turn_id, uuid.UUID) else uuid.UUID(turn_id)
    except ValueError:
        key = None
    turn = Turn.objects.filter(agent=agent, uuid=key).first() if key else None
    if turn is None:
        raise NotFound(f"Agent '{agent.name}' has no turn '{str(turn_id)[:80]}'.", code="turn_not_found")
    return turn


# --- lists ---------------------------------------------------------------------------
# How each list of the API is ordered and paged (studio.lists), and its pages
# in their wire shapes.

AGENTS = Keyset("agents", order="name", default_limit=1000, key_type=str)
TURNS = Keyset("turns", order="-id", default_limit=20)
HISTORY = Keyset("blocks", order="number", default_limit=50)
COMPACTIONS = Keyset("compactions", order="-id", default_limit=20)


def agents_page(*, game: Game, after: str | None, limit: int) -> Page:
    """The game's agents by name."""
    return AGENTS.page(Agent.objects.filter(game=game), after=after, limit=limit, wire=each(agent_wire))


def turns_page(*, agent: Agent, status: str | None = None, after: int | None, limit: int) -> Page:
    """The agent's turns, newest first; only those in `status` when given."""
    turns = Turn.objects.filter(agent=agent)
    if status:
        turns = turns.filter(status=status)
    return TURNS.page(turns, after=after, limit=limit, wire=turns_wire)


def blocks_page(*, agent: Agent, after: int | None, limit: int) -> Page:
    """The agent's blocks in order, folded ones included."""
    blocks = Block.objects.filter(agent=agent).select_related("turn")
    return HISTORY.page(blocks, after=after, limit=limit, wire=each(block_wire))


def compactions_page(*, agent: Agent, after: int | None, limit: int) -> Page:
    """The agent's compactions, newest first."""
    items = Compaction.objects.filter(agent=agent).select_related("checkpoint")
    return COMPACTIONS.page(items, after=after, limit=limit, wire=each(compaction_wire))
