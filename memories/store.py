"""Who may write a memory, and the limits every write keeps.

- The agent, through its tools (`memories.tools` parses what the model sent
  and tells it what happened): creates, opens, closes, rewrites and deletes
  (`memory_open`, `memory_close`, `memory_delete`) — but only what it can
  see. A closed memory is never written or deleted until the agent opens it
  (the non-blind-write rule).
- The compactor: rewrites the content of memories that are open, at the
  version it read, and nothing else (`memory_rewrite_by_compactor`).
- A new agent's whole store and its history at once, from an agent file
  or a fork (`memories_install`): under the same limits as a store the
  agent wrote, or not at all.
- Game code and the API: nothing.

Limits, checked under the agent row's lock (`lock_store`) so parallel
writes cannot both slip under one:
- the store cap: UTF-8 bytes of name + description + content over the
  agent's memories (`STORE_CAP_BYTES`, 1 MiB by default) — every writer;
- `maxOpenTokens`, the tokens of the content of open memories: the agent
  cannot open past it. For the compactor it is a guideline (it is told the
  budget): its rewrite is kept unless open content would reach half of
  `maxTokens`, the bound `maxOpenTokens` itself is defined below;
- no memory the agent closes is larger than the whole open budget: it
  could never be opened again, so never read, written or deleted.

A refused write raises a `StoreError` whose attributes are the facts, and
changes nothing. Every change is kept as a `MemoryEvent` and announced
after commit.
"""

import unicodedata
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import BigIntegerField, F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.models import Agent
from studio.errors import DomainError
from studio.live import event_types
from studio.live.events import publish_on_commit
from studio.runtime import sql
from studio.tokens import count_tokens

from .models import Change, Memory, MemoryEvent, Writer


def memory_name(name: str) -> str:
    """A memory's name as the store keeps it: in Unicode NFC form, so the
    same letters typed either way (a precomposed é, or e and its accent)
    are one name. Every path that takes a name normalizes it so."""
    return unicodedata.normalize("NFC", name)


# --- what the store refuses -------------------------------------------------------


class StoreError(DomainError):
    """A memory write the store refuses; nothing was changed. The attributes
    are the facts, for the caller to tell in its own words (the model's tool
    result); the message is the short reason a dropped rewrite keeps."""

    code = "memory_refused"
    status = 409


class NoSuchMemory(StoreError):
    """`existing`: (id, name) of the store's memories, the most recently
    written first, as many as a refusal can list; `total`: how many there
    are, or NAMES_COUNTED_MOST + 1 for more than NAMES_COUNTED_MOST."""

    def __init__(self, name: str, *, existing: list[tuple[int, str]], total: int):
        super().__init__(f"there is no memory named '{name}'")
        self.name, self.existing, self.total = name, existing, total


class MemoryIsClosed(StoreError):
    """The non-blind-write rule: a closed memory is not written or deleted."""

    def __init__(self, name: str):
        super().__init__(f"memory '{name}' is closed")
        self.name = name


class NewMemoryIncomplete(StoreError):
    def __init__(self, name: str, *, missing: list[str]):
        super().__init__(f"a new memory needs {' and '.join(missing)}")
        self.name, self.missing = name, missing


class OverOpenBudget(StoreError):
    def __init__(
        self, name: str, *, tokens: int, in_use: int, budget: int, open_memories: list[tuple[str, int]]
    ):
        super().__init__(
            f"opening '{name}' would take {in_use + tokens} open tokens, over maxOpenTokens {budget}"
        )
        self.name, self.tokens, self.in_use, self.budget = name, tokens, in_use, budget
        self.needed = in_use + tokens
        self.open_memories = open_memories  # (name, tokens) of each open memory


class OverHeadings(StoreError):
    """Opening it would take the open memories' headings past their share
    of maxTokens (`heading_tokens`, MEMORY_HEADINGS_RATIO)."""

    def __init__(
        self, name: str, *, count: int, tokens: int, budget: int, open_memories: list[tuple[str, int]]
    ):
        super().__init__(
            f"opening '{name}' would take the headings of {count} open memories to {tokens} tokens, over "
            f"{budget}"
        )
        self.name, self.count, self.tokens, self.budget = name, count, tokens, budget
        self.open_memories = open_memories  # (name, tokens) of each open memory


class NeverOpenable(StoreError):
    """Content larger than the whole open budget: once closed, the memory
    could never be opened again — so never read, written or deleted."""

    def __init__(self, name: str, *, tokens: int, budget: int):
        super().__init__(f"'{name}' would be {tokens} tokens, more than the whole open budget of {budget}")
        self.name, self.tokens, self.budget = name, tokens, budget


class OverStoreCap(StoreError):
    def __init__(self, name: str, *, current: int, after: int, cap: int):
        super().__init__(f"the store would grow to {after} bytes, over the cap of {cap}")
        self.name, self.current, self.after, self.cap = name, current, after, cap


class OverHalfOfMaxTokens(StoreError):
    """Open content reaching half of `maxTokens` would crowd out the recent
    history beside it: the hard limit a compactor rewrite keeps."""

    def __init__(self, name: str, *, open_after: int, max_tokens: int):
        super().__init__(
            f"open memories would take {open_after:,} tokens, half of maxTokens ({max_tokens:,}) or more"
        )
        self.name, self.open_after, self.max_tokens = name, open_after, max_tokens


class NotInstallable(StoreError):
    """A whole store given at once (an import's, a fork's) that breaks one of
    the rules: `index` is the memory's place in what was given, `refused`
    the rule's own refusal, with its facts."""

    def __init__(self, index: int, refused: StoreError):
        super().__init__(refused.message)
        self.index, self.refused = index, refused


class ChangedSinceRead(StoreError):
    """The compactor's non-blind write: the memory is not as it read it."""

    def __init__(self, name: str, *, what: str):
        super().__init__(f"the memory was {what} after the compactor read it")
        self.name, self.what = name, what


# --- sums and locks --------------------------------------------------------------------


def store_cap_bytes() -> int:
    return settings.STUDIO["STORE_CAP_BYTES"]


def memory_bytes(name: str, description: str, content: str) -> int:
    return len(name.encode()) + len(description.encode()) + len(content.encode())


def store_bytes(agent: Agent) -> int:
    """The store's size, summed from its memories (what is shown; a write's
    cap check reads the agent's kept `store_size`)."""
    return Memory.objects.filter(agent=agent).aggregate(total=Sum("bytes"))["total"] or 0


def _store_size_moved(agent_id: int, by: int) -> None:
    """Move the agent's kept store size by `by` bytes, under its row's lock."""
    if by:
        Agent.objects.filter(pk=agent_id).update(store_size=F("store_size") + by)


def store_sizes_recount(*, batch: int = 500) -> int:
    """Each agent's kept store size summed again from its memories, `batch`
    agents a transaction; how many were off. For an operator after a
    migration that ran beside writes (`manage.py store_recount`). Each
    batch takes its agents' store locks first, so it sums after any write
    holding one has committed, and no write starts before it has."""
    summed = (
        Memory.objects.filter(agent=OuterRef("pk")).order_by().values("agent").annotate(total=Sum("bytes"))
    )
    actual = Coalesce(Subquery(summed.values("total")), 0, output_field=BigIntegerField())
    off, after = 0, 0
    while ids := list(Agent.objects.filter(id__gt=after).order_by("id").values_list("id", flat=True)[:batch]):
        with transaction.atomic():
            list(Agent.objects.select_for_update().filter(id__in=ids).order_by("id").values_list("id"))
            wrong = Agent.objects.filter(id__in=ids).annotate(actual=actual).exclude(store_size=F("actual"))
            off += wrong.update(store_size=actual)
        after = ids[-1]
    return off


def heading_tokens(name: str, description: str) -> int:
    """What an open memory's heading (`### name — description`) takes of
    the context block, beside its content."""
    return count_tokens(f"### {name} — {description}\n")


def headings_budget(agent: Agent) -> int:
    """The most the open memories' headings may take together, as the
    closed memories' listing may: MEMORY_HEADINGS_RATIO of maxTokens."""
    return int(settings.STUDIO["MEMORY_HEADINGS_RATIO"] * agent.max_tokens)


def open_tokens(agent: Agent) -> int:
    return Memory.objects.filter(agent=agent, is_open=True).aggregate(total=Sum("tokens"))["total"] or 0


def lock_store(agent: Agent) -> Agent:
    """Take the agent's row lock: the store's writes queue behind it until
    the transaction ends. Call inside `transaction.atomic()`; the write
    functions below expect it taken."""
    return Agent.objects.select_for_update().get(pk=agent.pk)


def snapshot(memory: Memory | None) -> dict | None:
    if memory is None:
        return None
    return {
        "description": memory.description,
        "content": memory.content,
        "open": memory.is_open,
        "version": memory.version,
    }


def open_state(memory: Memory, *, is_open: bool | None = None) -> dict:
    """What an open or a close changes of a memory, as its history keeps
    it: whether it is open, and its version — not its text, which neither
    changes (the change before says it), so toggling a large memory writes
    a few bytes each time, not two copies of it."""
    return {"open": memory.is_open if is_open is None else is_open, "version": memory.version}


def written_state(memory: Memory, fields, *, is_open: bool | None = None) -> dict:
    """What a write changes of a memory, as its history keeps it: the
    `fields` written (description, content), whether it is open and its
    version — not a field it left as it was (the change before says it),
    so a new description on a large memory writes a few bytes, not two
    copies of its content."""
    return {**{key: getattr(memory, key) for key in fields}, **open_state(memory, is_open=is_open)}


def _cap_check(agent: Agent, name: str, *, old_bytes: int, new_bytes: int) -> None:
    """Raise `OverStoreCap` when replacing `old_bytes` with `new_bytes` takes
    the store past its cap. Shrinking is always allowed."""
    current = Agent.objects.values_list("store_size", flat=True).get(pk=agent.pk)
    after = current - old_bytes + new_bytes
    cap = store_cap_bytes()
    if after > cap and new_bytes > old_bytes:
        raise OverStoreCap(name, current=current, after=after, cap=cap)


def _openable_check(agent: Agent, name: str, tokens: int) -> None:
    if tokens > agent.max_open_tokens:
        raise NeverOpenable(name, tokens=tokens, budget=agent.max_open_tokens)


def record(
    agent: Agent,
    name: str,
    change: str,
    *,
    by: str,
    before: dict | None,
    after: dict | None,
    turn_id=None,
    note: str = "",
    at=None,
) -> MemoryEvent:
    """Keep one change in the memory's history and announce it after commit
    (a dropped rewrite is kept, not announced: nothing changed). An agent's
    change is in its running block, the `last_block` `lock_store` read; a
    write is kept `at` the memory's `updated_at`."""
    event = MemoryEvent.objects.create(
        agent=agent,
        name=name,
        change=change,
        by=by,
        turn_id=turn_id,
        block=agent.last_block if by == Writer.AGENT else agent.change_block(),
        before=before,
        after=after,
        note=note,
        created_at=at or timezone.now(),
    )
    if change != Change.DROPPED:
        publish_on_commit(
            agent.pk,
            event_types.memory_changed(
                agent=agent.name, name=name, change=change, by=by, turn_id=str(turn_id) if turn_id else None
            ),
        )
    return event


def memory_save(memory: Memory, *, by: str, **fields) -> Memory:
    """Apply `fields` to `memory`, recount it and bump its version (and its
    agent's store size: call under the store's lock)."""
    before = memory.bytes if memory.pk else 0
    for key, value in fields.items():
        setattr(memory, key, value)
    if "content" in fields:
        memory.tokens = count_tokens(memory.content)
    memory.bytes = memory_bytes(memory.name, memory.description, memory.content)
    memory.version = (memory.version or 0) + 1 if memory.pk else 1
    memory.updated_by = by
    memory.save()
    _store_size_moved(memory.agent_id, memory.bytes - before)
    return memory


# --- the agent's writes (under `lock_store`, inside the caller's transaction) ----------------


# The most names a refusal can list: each takes at least three of the
# listing's characters (memories/tools.py, LISTED_MAX_CHARS).
NAMES_LISTED_MOST = 2_000 // 3 + 1
# A refusal counts the names it leaves out up to this many ("over …" past it).
NAMES_COUNTED_MOST = 10_000


def memory_get(agent: Agent, name: str) -> Memory:
    memory = Memory.objects.filter(agent=agent, name=name).first()
    if memory is None:
        # Only the names a refusal can show are read (the index memory_recent_first),
        # and the rest counted up to a bound: a model steered into missing
        # again and again reads no more of a store of a hundred thousand
        # memories than of one of a thousand.
        written = Memory.objects.filter(agent=agent)
        recent = list(written.order_by("-updated_at", "-id").values_list("id", "name")[:NAMES_LISTED_MOST])
        total = written[: NAMES_COUNTED_MOST + 1].count() if len(recent) == NAMES_LISTED_MOST else len(recent)
        raise NoSuchMemory(name, existing=recent, total=total)
    return memory


def memory_open_already(agent: Agent, name: str) -> Memory | None:
    """Memory `name` if it is open, read without the store's lock (written
    out: the common tool call's one read; studio/runtime/sql.py says why)."""
    # Speed: the store's lock on the commonest tool call, and ORM building; guarded by bench/send_overhead.py (statements per send).
    return sql.first(Memory, {"agent": agent.pk, "name": name, "is_open": True})


@dataclass(frozen=True)
class Opened:
    memory: Memory
    was_open: bool
    open_tokens: int | None = None  # when it opened: open content now, in tokens


def memory_open(*, agent: Agent, name: str, turn_id=None) -> Opened:
    """Mark a memory open, within `maxOpenTokens`. Opening one already open
    changes nothing."""
    memory = memory_get(agent, name)
    if memory.is_open:
        return Opened(memory, was_open=True)
    in_use = open_tokens(agent)
    if in_use + memory.tokens > agent.max_open_tokens:
        opened = Memory.objects.filter(agent=agent, is_open=True).values_list("name", "tokens")
        raise OverOpenBudget(
            name,
            tokens=memory.tokens,
            in_use=in_use,
            budget=agent.max_open_tokens,
            open_memories=list(opened),
        )
    _headings_check(agent, memory)
    before = open_state(memory)
    _set_open(memory, True)
    record(
        agent, name, Change.OPENED, by=Writer.AGENT, before=before, after=open_state(memory), turn_id=turn_id
    )
    return Opened(memory, was_open=False, open_tokens=in_use + memory.tokens)


def _headings_check(agent: Agent, memory: Memory) -> None:
    """Refuse an open that would take the open memories' headings past
    their budget: content that costs next to nothing of maxOpenTokens (an
    empty memory) still shows its heading in full, and enough of them would
    make a context block no send fits beside. With nothing else open it
    is never refused: there would be nothing to close, and a memory that
    could never be opened could never be deleted."""
    opened = list(
        Memory.objects.filter(agent=agent, is_open=True).values_list("name", "description", "tokens")
    )
    if not opened:
        return
    tokens = heading_tokens(memory.name, memory.description) + sum(
        heading_tokens(name, description) for name, description, _ in opened
    )
    if tokens > headings_budget(agent):
        raise OverHeadings(
            memory.name,
            count=len(opened) + 1,
            tokens=tokens,
            budget=headings_budget(agent),
            open_memories=[(name, used) for name, _, used in opened],
        )


# The note of a close that followed a write in the same close_memory call.
CLOSED_AS_SAVED = "closed by the close_memory call that saved it"


@dataclass(frozen=True)
class Closed:
    memory: Memory
    created: bool
    changed: bool  # content or description written


def memory_close(
    *, agent: Agent, name: str, description: str | None = None, content: str | None = None, turn_id=None
) -> Closed:
    """Create-or-update, then closed: a new name needs both fields; an open
    memory takes whichever fields are given; a closed one is refused."""
    memory = Memory.objects.filter(agent=agent, name=name).first()
    if memory is None:
        return _memory_create(agent, name, description, content, turn_id)
    if not memory.is_open:
        raise MemoryIsClosed(name)
    given = {"description": description, "content": content}
    fields = {key: value for key, value in given.items() if value not in (None, getattr(memory, key))}
    _update_check(agent, memory, fields)
    if not fields:  # a plain close is not a write
        before = open_state(memory)
        _set_open(memory, False)
        record(
            agent,
            name,
            Change.CLOSED,
            by=Writer.AGENT,
            before=before,
            after=open_state(memory),
            turn_id=turn_id,
        )
        return Closed(memory, created=False, changed=False)
    before = written_state(memory, fields)
    memory_save(memory, by=Writer.AGENT, is_open=False, **fields)
    # Two facts, announced and kept as two changes: the write, then the close.
    written, at = written_state(memory, fields, is_open=True), memory.updated_at
    record(agent, name, Change.UPDATED, by=Writer.AGENT, before=before, after=written, turn_id=turn_id, at=at)
    record(
        agent,
        name,
        Change.CLOSED,
        by=Writer.AGENT,
        before=open_state(memory, is_open=True),
        after=open_state(memory),
        turn_id=turn_id,
        note=CLOSED_AS_SAVED,
    )
    return Closed(memory, created=False, changed=True)


def _update_check(agent: Agent, memory: Memory, fields: dict) -> None:
    """The limits on closing `memory` with `fields` written into it. Its
    size as it stands never stops a close: only new content larger than
    the whole open budget does (nothing the studio writes on its own makes
    an open memory that large: `_rewrite_check`)."""
    content = fields.get("content", memory.content)
    if "content" in fields:
        _openable_check(agent, memory.name, count_tokens(content))
    new_bytes = memory_bytes(memory.name, fields.get("description", memory.description), content)
    _cap_check(agent, memory.name, old_bytes=memory.bytes, new_bytes=new_bytes)


def _memory_create(agent: Agent, name: str, description: str | None, content: str | None, turn_id) -> Closed:
    missing = [key for key, value in (("description", description), ("content", content)) if value is None]
    if missing:
        raise NewMemoryIncomplete(name, missing=missing)
    _openable_check(agent, name, count_tokens(content))
    _cap_check(agent, name, old_bytes=0, new_bytes=memory_bytes(name, description, content))
    fresh = Memory(agent=agent, name=name, is_open=False)
    memory = memory_save(fresh, by=Writer.AGENT, description=description, content=content)
    after, at = snapshot(memory), memory.updated_at
    record(agent, name, Change.CREATED, by=Writer.AGENT, before=None, after=after, turn_id=turn_id, at=at)
    return Closed(memory, created=True, changed=True)


def memory_delete(*, agent: Agent, name: str, turn_id=None) -> None:
    """Remove an open memory for good: nothing is deleted unseen."""
    memory = memory_get(agent, name)
    if not memory.is_open:
        raise MemoryIsClosed(name)
    before = snapshot(memory)
    memory.delete()
    _store_size_moved(agent.pk, -memory.bytes)
    record(agent, name, Change.DELETED, by=Writer.AGENT, before=before, after=None, turn_id=turn_id)


def _set_open(memory: Memory, is_open: bool) -> None:
    """Open or close `memory` without writing it: who wrote it last, when,
    and its version stay as they were."""
    memory.is_open = is_open
    memory.save(update_fields=["is_open"])


# --- a whole store at once ---------------------------------------------------------------


def memories_install(*, agent: Agent, memories: list[Memory], history: list[MemoryEvent]) -> None:
    """Write the whole store of an agent that has none yet, and its
    history: an import's or a fork's. `memories` (unsaved, in the order
    they were made) keep their versions, writers and times; their counts
    are taken here. Under the store lock and the rules the agent's and the
    compactor's writes keep — the cap, open content below half of
    `maxTokens` (past `maxOpenTokens` together is what a compactor may
    leave: that budget is a guideline to it), no one memory, open or
    closed, larger than the whole open budget (an open one, once closed,
    could never be opened again) — or refused with `NotInstallable`, writing nothing. Call
    inside `transaction.atomic()`."""
    agent = lock_store(agent)
    for memory in memories:
        memory.agent = agent
        memory.tokens = count_tokens(memory.content)
        memory.bytes = memory_bytes(memory.name, memory.description, memory.content)
    _install_check(agent, memories)
    times = [memory.updated_at for memory in memories]
    made = Memory.objects.bulk_create(memories)
    _store_size_moved(agent.pk, sum(memory.bytes for memory in made))
    for memory, at in zip(made, times, strict=True):
        memory.updated_at = at or memory.updated_at  # saving set it to now (auto_now)
    Memory.objects.bulk_update(made, ["updated_at"], batch_size=500)
    for event in history:
        event.agent = agent
    MemoryEvent.objects.bulk_create(history, batch_size=500)


def _install_check(agent: Agent, memories: list[Memory]) -> None:
    stored = in_use = 0
    opened: list[tuple[str, int]] = []
    for index, memory in enumerate(memories):
        try:
            if stored + memory.bytes > store_cap_bytes():
                raise OverStoreCap(
                    memory.name, current=stored, after=stored + memory.bytes, cap=store_cap_bytes()
                )
            if memory.is_open and (in_use + memory.tokens) * 2 >= agent.max_tokens:
                # The compactor's own bound: open content may pass the
                # guideline maxOpenTokens (the compactor grows it), never
                # half of maxTokens.
                raise OverHalfOfMaxTokens(
                    memory.name, open_after=in_use + memory.tokens, max_tokens=agent.max_tokens
                )
            # Open or closed: an open one the agent closes could never be
            # opened again (a plain close is never refused for its size).
            _openable_check(agent, memory.name, memory.tokens)
        except StoreError as refused:
            raise NotInstallable(index, refused) from None
        stored += memory.bytes
        if memory.is_open:
            in_use += memory.tokens
            opened.append((memory.name, memory.tokens))


# --- the compactor's writes ---------------------------------------------------------------


# The most of a dropped rewrite its history keeps (far more than a memory a
# game keeps open): a larger one — only a model's answer past its output
# limit can be — is kept cut, its length beside it.
DROPPED_KEPT_CHARS = 262_144


def memory_rewrite_by_compactor(
    *, agent: Agent, name: str, memory_id: int, version_read: int, content: str
) -> Memory | None:
    """Set an open memory's content as the compactor rewrote it — only if it
    is the very memory the compactor was shown (`memory_id`: a memory
    deleted and made again under its name is another one), still open and
    unchanged since it was read (at `version_read`), and within the hard
    limits: the store cap, open content below half of `maxTokens`, and no
    one memory larger than the whole of `maxOpenTokens` (closed, it could
    never be opened again). Open memories past `maxOpenTokens` together are
    kept: that budget is a guideline, the compactor is told it. A rewrite that cannot be applied is kept in the memory's
    history as dropped, with the reason. Returns the memory when the
    rewrite was applied."""
    with transaction.atomic():
        agent = lock_store(agent)
        memory = Memory.objects.filter(agent=agent, name=name).first()
        try:
            _rewrite_check(agent, memory, name, memory_id, version_read, content)
        except StoreError as refused:
            if memory is not None:  # kept in its history, with the reason
                before, proposed = snapshot(memory), {"content": content[:DROPPED_KEPT_CHARS]}
                if len(content) > DROPPED_KEPT_CHARS:  # a model's answer past any memory's size
                    proposed["chars"] = len(content)
                note = refused.message
                record(
                    agent, name, Change.DROPPED, by=Writer.COMPACTOR, before=before, after=proposed, note=note
                )
            return None
        if memory.content == content:
            return memory
        before = snapshot(memory)
        memory_save(memory, by=Writer.COMPACTOR, content=content)
        after, at = snapshot(memory), memory.updated_at
        record(agent, name, Change.UPDATED, by=Writer.COMPACTOR, before=before, after=after, at=at)
        return memory


def _rewrite_check(
    agent: Agent, memory: Memory | None, name: str, memory_id: int, version_read: int, content: str
) -> None:
    if memory is None:
        raise ChangedSinceRead(name, what="deleted")
    if memory.pk != memory_id:
        raise ChangedSinceRead(name, what="deleted and made again")
    if not memory.is_open:
        raise ChangedSinceRead(name, what="closed")
    if memory.version != version_read:
        raise ChangedSinceRead(name, what="written")
    _cap_check(agent, name, old_bytes=memory.bytes, new_bytes=memory_bytes(name, memory.description, content))
    new_tokens = count_tokens(content)
    open_after = open_tokens(agent) - memory.tokens + new_tokens
    if new_tokens > memory.tokens and open_after * 2 >= agent.max_tokens:
        raise OverHalfOfMaxTokens(name, open_after=open_after, max_tokens=agent.max_tokens)
    if new_tokens > memory.tokens:
        # Once the agent closed it, a memory larger than the whole open
        # budget could never be opened again.
        _openable_check(agent, name, new_tokens)
