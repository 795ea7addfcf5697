"""The Memories surface: an agent's store, live, with each memory's history.

Read-only, like the API: only the agent (its tools) and the compactor write
memories. The page reads through `StorePage`, whose parts are computed when
a template first touches them — so a live fragment refetch runs only the
queries its own fragment needs.
"""

import hashlib
import re
from datetime import datetime
from functools import cached_property

from django.contrib.auth.decorators import login_required
from django.db.models import Count, F, Max, Q, Window
from django.db.models.functions import RowNumber
from django.http import Http404
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from agents.history.diffs import DIFF_MAX_LINES, DiffBudget
from agents.selectors import agent_get
from studio.errors import NotFound
from studio.http.params import whole_number
from studio.pages.helpers import meter, time_ago
from studio.pages.shell import member_access, render_page

from . import store
from .models import Change, Memory, MemoryEvent, StoreBaseline, Writer

# Changes shown per memory on the page; `?memory=<name>` shows all of one.
HISTORY_SHOWN = 20
HISTORY_MAX = 1000
# Memories of the store per page (`?page=N`), and deleted memories shown:
# what a page shows is bounded however large the store or its history.
MEMORIES_SHOWN = 100
DELETED_SHOWN = 100


# --- small formatting helpers -------------------------------------------------------------


def size_text(count: int) -> str:
    if count < 1024:
        return f"{count:,} B"
    if count < 1024 * 1024:
        return f"{count / 1024:,.1f} KB"
    return f"{count / (1024 * 1024):,.2f}".rstrip("0").rstrip(".") + " MB"


def anchor(name: str) -> str:
    """A stable HTML id for a memory name (names may hold any character)."""
    return "m-" + hashlib.sha1(name.encode()).hexdigest()[:10]


# --- diffs ----------------------------------------------------------------------------

WORDS = re.compile(r"\s+|\w+|[^\w\s]+")
# Unchanged text longer than this is shortened to its edges in a diff.
KEEP_EDGE = 90
WORD_DIFF_MAX_CHARS = 4000
# Changed lines less alike than this are shown as removed and added whole.
REWRITE_RATIO = 0.4


def diff_html(before: str, after: str, budget: DiffBudget | None = None):
    """An inline diff of two texts as safe HTML: removed text in <del>,
    added text in <ins>, long unchanged stretches shortened to their edges.
    Lines are matched first, then the words of changed lines, so it stays
    quick on long memories and readable on prose. None past the bounds of a
    diff (`agents.history.reads`), for the page to say so."""
    budget = budget or DiffBudget()
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    opcodes = budget.opcodes(a, b) if len(a) + len(b) <= DIFF_MAX_LINES else None
    if opcodes is None:
        return None
    pieces = []
    for op, i1, i2, j1, j2 in opcodes:
        old, new = "".join(a[i1:i2]), "".join(b[j1:j2])
        if op == "equal":
            pieces.append(("same", old))
        elif op == "replace" and len(old) + len(new) <= WORD_DIFF_MAX_CHARS:
            pieces += _word_pieces(old, new, budget)
        else:
            pieces += [("del", old), ("ins", new)]
    return _pieces_html(_merged(pieces))


def _word_pieces(old: str, new: str, budget: DiffBudget) -> list[tuple[str, str]]:
    a, b = WORDS.findall(old), WORDS.findall(new)
    opcodes = budget.opcodes(a, b)
    alike = opcodes is not None and _ratio(opcodes, len(a) + len(b)) >= REWRITE_RATIO
    if not alike:  # mostly rewritten, or too long to compare: word by word would be noise
        return [("del", old), ("ins", new)]
    pieces = []
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            pieces.append(("same", "".join(a[i1:i2])))
        else:
            pieces += [("del", "".join(a[i1:i2])), ("ins", "".join(b[j1:j2]))]
    return pieces


def _ratio(opcodes, length: int) -> float:
    """difflib's ratio, from opcodes: the share of both sides matched."""
    matched = sum(i2 - i1 for op, i1, i2, _, _ in opcodes if op == "equal")
    return 2 * matched / length if length else 1.0


def _merged(pieces):
    """Each run of changes as one removal then one addition. A bare space
    between two changes joins them, so "a b" → "c d" reads as one change."""
    merged, removed, added = [], "", ""
    for index, (kind, text) in enumerate(pieces):
        between_changes = 0 < index < len(pieces) - 1 and pieces[index + 1][0] != "same"
        if kind == "same" and not (text.isspace() and (removed or added) and between_changes):
            if removed or added:
                merged += [("del", removed), ("ins", added)]
                removed = added = ""
            merged.append(("same", text))
        elif kind == "same":
            removed, added = removed + text, added + text
        elif kind == "del":
            removed += text
        else:
            added += text
    merged += [("del", removed), ("ins", added)]
    return [(kind, text) for kind, text in merged if text]


def _pieces_html(pieces):
    parts = []
    for index, (kind, text) in enumerate(pieces):
        if kind == "del":
            parts.append(format_html("<del>{}</del>", text))
        elif kind == "ins":
            if index and _glued(pieces[index - 1], text):
                parts.append(" ")  # "Mara wants" → "Find" reads "Mara wants Find", not "Mara wantsFind"
            parts.append(format_html("<ins>{}</ins>", text))
        else:
            parts.append(_shortened(text, first=index == 0, last=index == len(pieces) - 1))
    return mark_safe("".join(parts))


def _glued(before: tuple[str, str], added: str) -> bool:
    """Whether `added`, shown right after the removal `before`, would run
    into it: no space between the two."""
    kind, removed = before
    return kind == "del" and not removed[-1:].isspace() and not added[:1].isspace()


def _shortened(text: str, *, first: bool, last: bool):
    """Unchanged text, cut to the context either side of the changes."""
    if len(text) <= KEEP_EDGE * 2 + 20:
        return format_html("{}", text)
    head = "" if first else text[:KEEP_EDGE]
    tail = "" if last else text[-KEEP_EDGE:]
    gap = format_html(
        '<span class="diff-gap" title="{} unchanged characters">…</span>', len(text) - len(head) - len(tail)
    )
    return format_html("{}{}{}", head, gap, tail)


# --- the page's data ---------------------------------------------------------------------


def _history_row(event: MemoryEvent, now, budget: DiffBudget) -> dict:
    before, after = event.before or {}, event.after or {}
    row = {"event": event, "ago": time_ago(event.created_at, now), "anchor": f"e-{event.pk}"}
    # A change an imported file tells of is the file's; what it is told as
    # (a close_memory, a compactor rewrite) follows whom the file names.
    row["from_file"] = event.by == Writer.FILE
    row["author"] = event.file_by if row["from_file"] else event.by
    row["closed_as_saved"] = event.change == Change.CLOSED and event.note == store.CLOSED_AS_SAVED
    if event.change in (Change.UPDATED, Change.DROPPED):
        old_content = before.get("content", "")
        new_content = after.get("content", old_content)
        if new_content != old_content:
            row["content_diff"] = diff_html(old_content, new_content, budget)
            row["content_before"], row["content_after"] = old_content, new_content
            row["content_changed"] = True
            row["before_chars"], row["after_chars"] = f"{len(old_content):,}", f"{len(new_content):,}"
        new_description = after.get("description", before.get("description"))
        if new_description != before.get("description"):
            row["description_before"], row["description_after"] = before.get("description"), new_description
        # Histories kept before a close became a change of its own hold
        # updates that also closed the memory.
        row["closed_it"] = bool(before.get("open")) and after.get("open") is False
    return row


class StorePage:
    """What the Memories page shows about one agent, read when first used:
    a page of its store (MEMORIES_SHOWN memories, oldest first), the
    memory asked for wherever it is, and the newest deleted ones."""

    def __init__(self, agent, *, focus: str = "", page: int = 1):
        self.agent = agent
        self.focus = focus
        self.page = page
        self.now = timezone.now()

    @cached_property
    def _totals(self) -> dict:
        return Memory.objects.filter(agent=self.agent).aggregate(
            memories=Count("id"), open=Count("id", filter=Q(is_open=True))
        )

    @property
    def memory_count(self) -> int:
        return self._totals["memories"]

    @property
    def open_count(self) -> int:
        return self._totals["open"]

    @property
    def closed_count(self) -> int:
        return self.memory_count - self.open_count

    @cached_property
    def memories(self) -> list[Memory]:
        first = (self.page - 1) * MEMORIES_SHOWN
        shown = list(Memory.objects.filter(agent=self.agent).order_by("id")[first : first + MEMORIES_SHOWN])
        if self.focus and all(memory.name != self.focus for memory in shown):
            shown += Memory.objects.filter(agent=self.agent, name=self.focus)
        return shown

    @cached_property
    def pages(self) -> dict:
        """Which memories of the store this page shows, and its neighbours."""
        first = (self.page - 1) * MEMORIES_SHOWN + 1
        last = min(first + MEMORIES_SHOWN - 1, self.memory_count)
        return {
            "first": first,
            "last": last,
            "total": self.memory_count,
            "previous": self.page - 1 if self.page > 1 else None,
            "next": self.page + 1 if last < self.memory_count else None,
        }

    @cached_property
    def open_meter(self) -> dict:
        return meter(store.open_tokens(self.agent), self.agent.max_open_tokens)

    @cached_property
    def store_meter(self) -> dict:
        used, cap = store.store_bytes(self.agent), store.store_cap_bytes()
        return {**meter(used, cap), "used_text": size_text(used), "cap_text": size_text(cap)}

    @cached_property
    def _last_writes(self) -> dict[str, MemoryEvent]:
        """Each shown memory's newest write (created or updated).
        Memory.updated_at also moves when the agent merely opens or closes a
        memory, while updated_by does not — so who wrote it last, and when,
        come from here."""
        writes = MemoryEvent.objects.filter(
            agent=self.agent,
            name__in=[memory.name for memory in self.memories],
            change__in=[Change.CREATED, Change.UPDATED, Change.IMPORTED],
        )
        newest = writes.values("name").annotate(newest=Max("id")).values("newest")
        return {
            event.name: event
            for event in MemoryEvent.objects.filter(pk__in=newest).only("name", "by", "created_at")
        }

    @cached_property
    def pruned(self) -> StoreBaseline | None:
        """What retention kept in place of the changes it pruned, if it did."""
        return StoreBaseline.objects.filter(agent=self.agent).defer("memories").first()

    @cached_property
    def _pruned_writes(self) -> dict[str, tuple[str, datetime]]:
        """Who last wrote each memory of the store kept in place of pruned
        changes, and when (read only for a memory whose writes all went)."""
        if self.pruned is None or all(memory.name in self._last_writes for memory in self.memories):
            return {}
        entries = StoreBaseline.objects.values_list("memories", flat=True).get(pk=self.pruned.pk)
        return {
            entry["name"]: (entry["updatedBy"], datetime.fromisoformat(entry["updatedAt"]))
            for entry in entries
            if entry["updatedAt"]
        }

    @cached_property
    def rows(self) -> list[dict]:
        rows = []
        for memory in self.memories:
            write = self._last_writes.get(memory.name)
            if write:
                by, at = write.by, write.created_at
            else:
                by, at = self._pruned_writes.get(memory.name, (memory.updated_by, memory.updated_at))
            rows.append(
                {
                    "memory": memory,
                    "anchor": anchor(memory.name),
                    "written_by": by,
                    "written_at": at,
                    "ago": time_ago(at, self.now),
                    "size": size_text(memory.bytes),
                }
            )
        return rows

    @cached_property
    def _events(self) -> dict[str, list[MemoryEvent]]:
        """The newest changes of each memory shown, newest first:
        HISTORY_SHOWN of each, or all of the focused one."""
        names = [memory.name for memory in self.memories] + self._deleted_names
        ranked = MemoryEvent.objects.filter(agent=self.agent, name__in=names).annotate(
            rank=Window(RowNumber(), partition_by=[F("name")], order_by=F("id").desc())
        )
        events = list(ranked.filter(rank__lte=HISTORY_SHOWN).order_by("name", "-id"))
        if self.focus:
            events = [e for e in events if e.name != self.focus]
            events += MemoryEvent.objects.filter(agent=self.agent, name=self.focus).order_by("-id")[
                :HISTORY_MAX
            ]
        by_name: dict[str, list[MemoryEvent]] = {}
        for event in events:
            by_name.setdefault(event.name, []).append(event)
        return by_name

    @cached_property
    def diff_budget(self) -> DiffBudget:
        """One for the page's every diff: what a request may spend on them."""
        return DiffBudget()

    @cached_property
    def _counts(self) -> dict[str, tuple[int, int]]:
        """Each name's changes and its newest change's id, for every name
        with a history."""
        rows = (
            MemoryEvent.objects.filter(agent=self.agent).values_list("name").annotate(Count("id"), Max("id"))
        )
        return {name: (count, newest) for name, count, newest in rows}

    def _history(self, name: str) -> dict:
        events = self._events.get(name, [])
        total = self._counts.get(name, (0, 0))[0]
        rows = [_history_row(event, self.now, self.diff_budget) for event in events]
        return {
            "rows": rows,
            # Newest first, the studio's own changes (from the memory's
            # `imported` one back), then what the imported file tells of,
            # which came before it.
            "own_rows": [row for row in rows if not row["from_file"]],
            "file_rows": [row for row in rows if row["from_file"]],
            "total": total,
            "more": total - len(events),
            "is_focused": name == self.focus,
        }

    @cached_property
    def cards(self) -> list[dict]:
        return [{**row, "history": self._history(row["memory"].name)} for row in self.rows]

    @cached_property
    def _deleted_all(self) -> list[str]:
        """Names that have a history but are no longer in the store, the
        newest deleted first."""
        current = set(Memory.objects.filter(agent=self.agent).values_list("name", flat=True))
        gone = [name for name in self._counts if name not in current]
        return sorted(gone, key=lambda name: self._counts[name][1], reverse=True)

    @cached_property
    def _deleted_names(self) -> list[str]:
        shown = self._deleted_all[:DELETED_SHOWN]
        if self.focus in self._deleted_all and self.focus not in shown:
            shown.append(self.focus)
        return shown

    @property
    def deleted_count(self) -> int:
        return len(self._deleted_all)

    @cached_property
    def deleted(self) -> list[dict]:
        cards = []
        for name in self._deleted_names:
            history = self._history(name)
            last = history["rows"][0]["event"] if history["rows"] else None
            cards.append({"name": name, "anchor": anchor(name), "last": last, "history": history})
        return cards


# --- the view --------------------------------------------------------------------------

FRAGMENTS = {
    "budgets": "memories/_budgets.html",
    "store": "memories/_store.html",
    "memories": "memories/_memories.html",
}


@login_required
def memories_page(request, game, name):
    access = member_access(request, game)
    try:
        agent = agent_get(game=access.game, name=name)
    except NotFound:
        raise Http404("No such agent.") from None
    view = StorePage(
        agent, focus=store.memory_name(request.GET.get("memory", "")), page=_page_number(request)
    )
    if view.page > 1 and view.pages["first"] > view.memory_count:
        raise Http404("No such page of memories.")
    context = {"game": access.game, "section": "agents", "agent": agent, "view": view}
    return render_page(request, "memories/page.html", context, FRAGMENTS)


def _page_number(request) -> int:
    number = whole_number(request.GET.get("page", "1"), max_digits=7)
    if not number:
        raise Http404("No such page of memories.")
    return number
