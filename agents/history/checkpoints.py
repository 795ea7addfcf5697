"""An agent's checkpoints through time: the list, and one checkpoint with
what changed since the one before (its summary and each memory the
compactor rewrote, as diffs). A checkpoint's id on the wire is its place
among the agent's checkpoints (1 for the first), which an export, an
import and a fork keep."""

from agents.history.as_of import HistoryPruned, Kept, checkpoint_numbers, kept, one_moment, pruned_day
from agents.history.diffs import DiffBudget, lines_diff
from agents.models import Agent, Checkpoint
from agents.wire import checkpoint_brief, checkpoint_numbered
from memories.models import Change, MemoryEvent
from studio.errors import NotFound
from studio.http.lists import Keyset, Page
from studio.http.params import whole_number

# The list, paged as every list is (studio.http.lists).
CHECKPOINTS = Keyset("checkpoints", order="-id", default_limit=50)


def checkpoints_page(agent: Agent, *, after: int | None, limit: int) -> Page:
    """The agent's checkpoints, newest first."""
    numbers = checkpoint_numbers(agent)
    rows = Checkpoint.objects.filter(agent=agent).only(
        "kind", "through_block", "from_block", "block_tokens", "created_at"
    )
    return CHECKPOINTS.page(
        rows, after=after, limit=limit, wire=lambda found: [checkpoint_brief(c, numbers[c.pk]) for c in found]
    )


def checkpoint_detail(agent: Agent, number_text: str) -> dict:
    """Checkpoint number `number_text`, with what changed since the one
    before it: the summary, line by line, and each open memory the
    compactor rewrote (or whose rewrite it dropped, and why)."""
    with one_moment():
        return _checkpoint_detail(agent, number_text)


def _checkpoint_detail(agent: Agent, number_text: str) -> dict:
    number = whole_number(number_text, max_digits=9) or 0
    pair = list(Checkpoint.objects.filter(agent=agent).order_by("id")[max(number - 2, 0) : number])
    if number < 1 or len(pair) < min(number, 2):
        raise NotFound(
            f"Agent '{agent.name}' has no checkpoint '{number_text[:20]}'.", code="checkpoint_not_found"
        )
    checkpoint, previous = pair[-1], (pair[0] if len(pair) == 2 else None)
    refusal = _checkpoint_refusal(agent, number, checkpoint, previous)
    if refusal:
        raise HistoryPruned(refusal)
    events = MemoryEvent.objects.filter(checkpoint=checkpoint).order_by("id")
    return _detail(checkpoint, number, previous, events, DiffBudget())


def _checkpoint_refusal(
    agent: Agent,
    number: int,
    checkpoint: Checkpoint,
    previous: Checkpoint | None,
    horizon: Kept | None = None,
) -> str | None:
    """Why checkpoint `number`, with what it changed, can no longer be
    shown (retention emptied it, or the one before it, or pruned the
    compactor's rewrites for it); None when it can."""
    if checkpoint.pruned_at is None and (previous is None or previous.pruned_at is None):
        horizon = kept(agent) if horizon is None else horizon
        rewrites_kept = checkpoint.from_block is None or checkpoint.from_block > horizon.changes
        if rewrites_kept:
            return None
        return (
            f"The compactor's rewrites for checkpoint {number} of agent '{agent.name}' are no longer kept: "
            f"{horizon.changes_pruned()}."
        )
    emptied, which = (checkpoint, number) if checkpoint.pruned_at else (previous, number - 1)
    return (
        f"Checkpoint {which} of agent '{agent.name}' was emptied on {pruned_day(emptied.pruned_at)}, when the "
        f"history it folded was pruned, so "
        + (f"checkpoint {number}" if which == number else f"what checkpoint {number} changed since it")
        + " can no longer be shown; the checkpoints list still says what each folded and when."
    )


def checkpoints_detailed(agent: Agent, *, limit: int = CHECKPOINTS.default_limit) -> list[dict]:
    """The newest `limit` checkpoints, newest first, each as
    `checkpoint_detail` answers it — or, for one it refuses, as the list
    shows it with `pruned`, the sentence saying why: the same few queries
    however many there are."""
    with one_moment():
        return _checkpoints_detailed(agent, kept(agent), limit)


def _checkpoints_detailed(agent: Agent, horizon: Kept, limit: int) -> list[dict]:
    total = Checkpoint.objects.filter(agent=agent).count()
    # One more than shown: the oldest shown one's previous checkpoint.
    rows = list(Checkpoint.objects.filter(agent=agent).order_by("-id")[: limit + 1])[::-1]
    events: dict[int, list] = {}
    for event in MemoryEvent.objects.filter(checkpoint__in=rows).order_by("id"):
        events.setdefault(event.checkpoint_id, []).append(event)
    first = total - len(rows) + 1
    budget = DiffBudget()  # spent on the newest first, as they are shown
    newest_first = list(enumerate(rows))[::-1][:limit]
    shown = []
    for index, checkpoint in newest_first:
        number, previous = first + index, rows[index - 1] if index else None
        refusal = _checkpoint_refusal(agent, number, checkpoint, previous, horizon)
        if refusal:
            shown.append({**checkpoint_brief(checkpoint, number), "pruned": refusal})
        else:
            shown.append(_detail(checkpoint, number, previous, events.get(checkpoint.pk, []), budget))
    return shown


def _detail(
    checkpoint: Checkpoint, number: int, previous: Checkpoint | None, events, budget: DiffBudget
) -> dict:
    before = previous.summary if previous else None
    return {
        **checkpoint_numbered(checkpoint, number),
        "previous": number - 1 if previous else None,
        "changes": {
            "summary": {
                "before": before,
                "after": checkpoint.summary,
                "lines": lines_diff(before, checkpoint.summary, budget),
            },
            "rewrites": _rewrites(checkpoint, events, budget),
        },
    }


def _rewrites(checkpoint: Checkpoint, events, budget: DiffBudget) -> list[dict] | None:
    """The compactor's changes to open memories for this checkpoint
    (`events`, oldest first); None for a checkpoint written before the
    studio linked them."""
    if checkpoint.from_block is None:
        return None
    rewrites = []
    for event in events:
        before, after = (event.before or {}).get("content"), (event.after or {}).get("content")
        rewrites.append(
            {
                "name": event.name,
                "applied": event.change != Change.DROPPED,
                "before": before,
                "after": after,
                "note": event.note or None,
                "lines": lines_diff(before, after, budget),
            }
        )
    return rewrites
