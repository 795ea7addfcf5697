"""What the Agents pages show, gathered from the domain: the list's rows,
the sections of an agent's page (each computed only when its template
asks for it, so a live fragment costs only its own queries)."""

import json
from collections import Counter
from functools import cached_property

from django.conf import settings
from django.db.models import Count, Q, Sum

from agents import selectors, wire
from agents.history import as_of
from agents.history.as_of import kept
from agents.history.checkpoints import checkpoints_page
from agents.history.diffs import DiffBudget, lines_diff
from agents.models import (
    LIVE_REPLAY_STATUSES,
    LIVE_STATUSES,
    Agent,
    AgentRevision,
    Block,
    Compaction,
    Replay,
    Turn,
    TurnStatus,
    blocks_fill_running,
)
from agents.provenance import is_game_code
from agents.providers import causes
from agents.sending.context import Context, NotRecorded, context_assemble, current_checkpoint
from billing import ledger
from billing.funding import fix_link, game_funding
from billing.models import CostLine
from memories import store
from memories.models import Memory
from memories.pages import diff_html
from studio.errors import DomainError
from studio.pages.helpers import meter, share, tone

HISTORY_PAGE_SIZE = 20
COMPACTIONS_SHOWN = 5
# Blocks the timeline offers; older ones are reached from the history.
TIMELINE_BLOCKS = 200
# A timeline of more blocks than this (about a screenful) is grouped in
# ranges of this many (1–50, 51–100…), each to open on its own.
TIMELINE_RANGE = 50


# --- the compaction line -----------------------------------------------------------------


def soft_ratio() -> float:
    return settings.STUDIO["COMPACTION_SOFT_RATIO"]


# --- the list page ------------------------------------------------------------------------


def agent_rows(game) -> list[dict]:
    """Each agent of the game with its stats and bars."""
    agents = list(selectors.game_agents(game).order_by("name"))
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

    def __init__(self, agent: Agent, *, before: int | None = None, is_operator: bool = False):
        self.agent = agent
        self.before = before
        self.is_operator = is_operator

    @property
    def is_copy(self) -> bool:
        """A replay's copy: it takes no sends and no edits (its page says
        what it is, `agent_pages.origin`)."""
        return self.agent.replay_of_id is not None

    @cached_property
    def next_send(self) -> dict:
        """Whether the game can fund the agent's next send now, in words,
        and the way to the fix for this reader."""
        funding = game_funding(self.agent.game, is_operator=self.is_operator)
        send = funding.for_agent(self.agent.name)
        return {
            "is_refused": bool(send and send.short_of),
            "sentence": funding.agent_sentence(self.agent.name),
            "fix": funding.agent_fix(self.agent.name),
        }

    @property
    def refusal_fix(self) -> dict:
        """Where a refusal for want of credits or cap room is lifted (a
        compaction that waits for credits)."""
        return fix_link(self.agent.game, None, is_operator=self.is_operator)

    @cached_property
    def revision(self):
        """The config's newest revision: who defined it, from where, when."""
        return selectors.revision_latest(self.agent)

    @property
    def defined_by_game(self) -> bool:
        """Game code defined the config last: its next construct of the
        agent replaces an edit made here."""
        return is_game_code(self.revision)

    @cached_property
    def stats(self) -> dict:
        stats = selectors.agent_stats(self.agent)
        agent = self.agent
        counts = Memory.objects.filter(agent=agent).aggregate(
            memories=Count("id"), open=Count("id", filter=Q(is_open=True))
        )
        return {
            **stats,
            "memoryCount": counts["memories"],
            "openCount": counts["open"],
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
                **wire.compaction_wire(item),
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
        has_older, page = len(page) > HISTORY_PAGE_SIZE, blocks_fill_running(page[:HISTORY_PAGE_SIZE])
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
        **wire.block_wire(block),
        "created": block.created_at,
        "turn": turn,
        "error": turn.error if turn else "",
        # A failed model call's class, and its label (`causes`).
        "error_class": turn.error_class if turn else "",
        "error_label": causes.label(turn.error_class) if turn else "",
        "cut_short": turn.cut_short if turn else "",
        "cost": wire.turn_cost(turn, lines.get(turn.uuid, [])) if turn else None,
        "can_cancel": block.status in LIVE_STATUSES and turn is not None,
    }


# --- deleting an agent ------------------------------------------------------------------


def deletion_view(agent: Agent) -> dict:
    """What deleting `agent` removes (`services.agent_delete`: the agent and
    everything it owns, its replays' copies with it) and what stays (the
    game's cost lines, which name it by value; its forks, agents of their
    own), counted now; and whether a turn or replay of it is live, which
    the delete would be refused for."""
    return {
        "blocks": Block.objects.filter(agent=agent).count(),
        "memories": Memory.objects.filter(agent=agent).count(),
        "checkpoints": agent.checkpoints.count(),
        "revisions": AgentRevision.objects.filter(agent=agent).count(),
        "replays": Replay.objects.filter(agent=agent).count(),
        "cost_lines": CostLine.objects.filter(game_id=agent.game_id, agent_name=agent.name).count(),
        "forks": list(
            Agent.objects.filter(game_id=agent.game_id, forked_from=agent.name, replay_of=None)
            .order_by("name")
            .values_list("name", flat=True)[:20]
        ),
        "is_busy": Turn.objects.filter(agent=agent, status__in=LIVE_STATUSES).exists()
        or Replay.objects.filter(agent=agent, status__in=LIVE_REPLAY_STATUSES).exists(),
    }


# --- through time: the timeline, an agent as of a block ---------------------------------


def timeline_view(agent: Agent, *, current: int | None = None) -> dict:
    """The newest blocks, oldest first, each checkpoint standing before the
    first block it was in force for (the one in force before the first
    block shown, first). `items` are {"block": …} or {"checkpoint": …}."""
    line = timeline(agent, limit=TIMELINE_BLOCKS)
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
        "ranges": timeline_ranges(items, current=current) if len(blocks) > TIMELINE_RANGE else None,
        "first": first,
        "has_unrecorded": any(not block["recorded"] for block in blocks),
        "shown": len(blocks),
        "total": agent.last_block,
        "pruned": line["pruned"],
    }


def timeline_ranges(items: list[dict], *, current: int | None) -> list[dict]:
    """The timeline's items in ranges of TIMELINE_RANGE blocks by number
    (1–50, 51–100…; a checkpoint goes with the block it stands before),
    each with how many of its blocks failed, were cancelled or run now, and
    `open`: the range of block `current` when it is shown, else the newest."""
    ranges, waiting = [], []
    for item in items:
        if "checkpoint" in item:
            waiting.append(item)
            continue
        block = item["block"]
        start = (block["block"] - 1) // TIMELINE_RANGE * TIMELINE_RANGE + 1
        if not ranges or ranges[-1]["start"] != start:
            ranges.append(
                {
                    "start": start,
                    "first": block["block"],
                    "items": [],
                    "statuses": Counter(),
                    "has_current": False,
                }
            )
        shown = ranges[-1]
        shown["items"] += [*waiting, item]
        waiting = []
        shown["last"] = block["block"]
        shown["statuses"][block["status"]] += 1
        shown["has_current"] = shown["has_current"] or block["is_current"]
    if not ranges:
        return ranges
    ranges[-1]["items"] += waiting
    opened = next((shown for shown in ranges if shown["has_current"]), ranges[-1])
    for shown in ranges:
        shown["open"] = shown is opened
        shown["notes"] = [
            f"{shown['statuses'][status]} {status}"
            for status in (TurnStatus.FAILED, TurnStatus.CANCELLED, TurnStatus.RUNNING, TurnStatus.WAITING)
            if shown["statuses"][status]
        ]
    return ranges


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
            self.block = as_of.block_at(agent, number)
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
        store_then = as_of.memories_at_block(self.agent, self.number)
        return {
            **store_then,
            "open_meter": meter(store_then["openTokens"], store_then["maxOpenTokens"]),
            "store_meter": meter(store_then["storeBytes"], store_then["storeCapBytes"]),
        }

    @cached_property
    def _context(self) -> tuple:
        try:
            return context_view(as_of.context_of_block(self.agent, self.block)), None
        except (NotRecorded, as_of.HistoryPruned) as refused:
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


def timeline(agent: Agent, *, limit: int = 200) -> dict:
    """The newest `limit` blocks and checkpoints, oldest first: what the
    agent page's timeline offers to look at as of — and, once retention
    pruned some of its history, the sentence saying what (`pruned`)."""
    blocks = (
        Block.objects.filter(agent=agent)
        .select_related("turn")
        .only("number", "status", "folded", "created_at", "turn__status")
    )
    horizon = kept(agent)
    return {
        "pruned": horizon.pruned() if horizon.through else None,
        "blocks": [
            {
                "block": block.number,
                "status": wire.block_status(block),
                "folded": block.folded,
                "recorded": block.number >= agent.recorded_from_block,
                "createdAt": block.created_at.isoformat(),
            }
            for block in reversed(blocks.order_by("-number")[:limit])
        ],
        "checkpoints": list(reversed(checkpoints_page(agent, after=None, limit=limit).items)),
    }


# --- replays ----------------------------------------------------------------------------------

CONFIG_LABELS = {
    "systemPrompt": "System prompt",
    "model": "Model",
    "memory": "Memory",
    "compaction": "Compaction",
    "tools": "The game’s tools",
}
# The parts shown as a diff of their lines.
CONFIG_TEXTS = ("systemPrompt", "tools")


def config_text(key: str, value) -> str:
    """A part of a config (its wire shape) as the pages say it."""
    if key == "memory":
        return f"on, maxOpenTokens {value['maxOpenTokens']:,}" if value else "off"
    if key == "compaction":
        return f"{value['type']}, maxTokens {value['maxTokens']:,}"
    if key == "tools":
        return json.dumps(value or [], indent=2, ensure_ascii=False)
    return value


def config_changes(before: dict, after: dict) -> list[dict]:
    """Each part of a config (wire shapes) `after` changes, as the pages
    show it; a system prompt with its lines' diff."""
    changes, budget = [], DiffBudget()
    for key, label in CONFIG_LABELS.items():
        # A config kept before the game's tools were has none.
        was, now = before.get(key), after.get(key)
        if was == now or (key == "tools" and not was and not now):
            continue
        change = {"key": key, "label": label, "before": config_text(key, was), "after": config_text(key, now)}
        if key in CONFIG_TEXTS:
            change["lines"] = lines_diff(change["before"], change["after"], budget)
        changes.append(change)
    return changes


class ReplayPage:
    """A replay side by side: its rows (with the replies' differences
    marked), the stores compared, what it changed of the definition."""

    def __init__(self, replay: Replay):
        self.replay = replay

    @cached_property
    def detail(self) -> dict:
        return selectors.replay_detail(self.replay)

    @cached_property
    def rows(self) -> list[dict]:
        budget = DiffBudget()
        rows = []
        for row in self.detail["rows"]:
            both = row["original"] and row["replay"]
            differs = both and not row["sameReply"]
            diff = diff_html(row["original"]["reply"], row["replay"]["reply"], budget) if differs else None
            unanswered = [c for c in (row["replay"] or {}).get("toolCalls", ()) if c.get("notInOriginal")]
            rows.append({**row, "reply_diff": diff, "reply_differs": differs, "not_in_original": unanswered})
        return rows

    @cached_property
    def changes(self) -> list[dict]:
        """What the replay plays with, against the agent's config now."""
        return config_changes(wire.config_wire(self.replay.agent), self.replay.config)

    @property
    def copy_name(self) -> str | None:
        """The copy's name while it is there to be looked at (it goes once
        the replay has ended)."""
        return self.replay.replay_agent_name if self.replay.replay_agent_id is not None else None

    @property
    def is_live(self) -> bool:
        return self.detail["status"] in ("queued", "running")

    @property
    def played_share(self) -> float:
        progress = self.detail["progress"]
        return share(progress["played"], progress["total"])


# --- the revisions of an agent's config ------------------------------------------------------

# Revisions the page lists, newest first; older ones are at GET …/revisions.
REVISIONS_SHOWN = 100


class RevisionsPage:
    """An agent's config revisions, newest first, each with who defined it,
    from where and when; and two of them compared (`compared`): by default
    the newest against the one before it."""

    shown_max = REVISIONS_SHOWN

    def __init__(self, agent: Agent, *, older: int | None, newer: int | None):
        self.agent = agent
        self.asked = (older, newer)

    @cached_property
    def revisions(self) -> list[AgentRevision]:
        return list(AgentRevision.objects.filter(agent=self.agent).order_by("-number")[:REVISIONS_SHOWN])

    @cached_property
    def compared(self) -> dict | None:
        """The two revisions compared (`older`, `newer`: what `newer` changes
        of `older`) and the changes; None when there are not two to compare."""
        by_number = {revision.number: revision for revision in self.revisions}
        older, newer = self.asked
        newer = by_number.get(newer) or (self.revisions[0] if self.revisions else None)
        if older in by_number:
            older = by_number[older]
        else:
            older = next((r for r in self.revisions if r.number < newer.number), None) if newer else None
        if older is None or newer is None:
            return None
        changes = config_changes(wire.config_wire(older), wire.config_wire(newer))
        return {"older": older, "newer": newer, "changes": changes}
