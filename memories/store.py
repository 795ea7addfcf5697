"""Who may write a memory, and the limits every write keeps.

- The agent, through its tools (`memories.tools`): creates, opens, closes,
  rewrites and deletes — but only what it can see. A closed memory is never
  written or deleted until the agent opens it (the non-blind-write rule).
- The compactor: rewrites the content of memories that are open, at the
  version it read, and nothing else (`memory_rewrite_by_compactor`).
- Game code and the API: nothing.

Two limits hold on every write, under the agent row's lock so parallel
writes cannot both slip under a limit:
- the store cap: UTF-8 bytes of name + description + content over the
  agent's memories (`STORE_CAP_BYTES`, 1 MiB by default);
- `maxOpenTokens`: tokens of the content of open memories.

Every change is kept as a `MemoryEvent` and announced after commit.
"""

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from agents.models import Agent
from studio.events import publish_on_commit
from studio.tokens import count_tokens

from .models import Change, Memory, MemoryEvent, Writer


def store_cap_bytes() -> int:
    return settings.STUDIO["STORE_CAP_BYTES"]


def memory_bytes(name: str, description: str, content: str) -> int:
    return len(name.encode()) + len(description.encode()) + len(content.encode())


def store_bytes(agent: Agent) -> int:
    return Memory.objects.filter(agent=agent).aggregate(total=Sum("bytes"))["total"] or 0


def open_tokens(agent: Agent) -> int:
    return Memory.objects.filter(agent=agent, is_open=True).aggregate(total=Sum("tokens"))["total"] or 0


def lock_store(agent: Agent) -> Agent:
    """Take the agent's row lock: the store's writes queue behind it until
    the transaction ends. Call inside `transaction.atomic()`."""
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


@dataclass(frozen=True)
class StoreGrowth:
    """A write that would take the store past its cap."""

    current: int
    after: int
    cap: int


def check_growth(agent: Agent, *, old_bytes: int, new_bytes: int) -> StoreGrowth | None:
    """None when the store can take a write replacing `old_bytes` with
    `new_bytes`; otherwise the numbers to report."""
    current = store_bytes(agent)
    after = current - old_bytes + new_bytes
    cap = store_cap_bytes()
    if after > cap and new_bytes > old_bytes:
        return StoreGrowth(current=current, after=after, cap=cap)
    return None


def record(
    *,
    agent: Agent,
    name: str,
    change: str,
    by: str,
    before: dict | None,
    after: dict | None,
    turn_id=None,
    note: str = "",
) -> MemoryEvent:
    event = MemoryEvent.objects.create(
        agent=agent,
        name=name,
        change=change,
        by=by,
        turn_id=turn_id,
        before=before,
        after=after,
        note=note,
    )
    if change != Change.DROPPED:
        publish_on_commit(
            agent.pk,
            {"type": "memory.changed", "agent": agent.name, "name": name, "change": change, "by": by},
        )
    return event


def memory_save(memory: Memory, *, by: str, **fields) -> Memory:
    """Apply `fields` to `memory`, recount it and bump its version."""
    for key, value in fields.items():
        setattr(memory, key, value)
    if "content" in fields:
        memory.tokens = count_tokens(memory.content)
    memory.bytes = memory_bytes(memory.name, memory.description, memory.content)
    memory.version = (memory.version or 0) + 1 if memory.pk else 1
    memory.updated_by = by
    memory.save()
    return memory


def memory_rewrite_by_compactor(*, agent: Agent, name: str, version_read: int, content: str) -> Memory | None:
    """Set an open memory's content as the compactor rewrote it — only if it
    is still open and unchanged since the compactor read it (at
    `version_read`), and only within the store cap and `maxOpenTokens`.
    A rewrite that cannot be applied is kept in the memory's history as
    dropped. Returns the memory when the rewrite was applied."""
    with transaction.atomic():
        agent = lock_store(agent)
        memory = Memory.objects.filter(agent=agent, name=name).first()
        reason = _rewrite_refusal(agent, memory, version_read, content)
        if reason:
            if memory is not None:
                record(
                    agent=agent,
                    name=name,
                    change=Change.DROPPED,
                    by=Writer.COMPACTOR,
                    before=snapshot(memory),
                    after={"content": content},
                    note=reason,
                )
            return None
        if memory.content == content:
            return memory
        before = snapshot(memory)
        memory_save(memory, by=Writer.COMPACTOR, content=content)
        record(
            agent=agent,
            name=name,
            change=Change.UPDATED,
            by=Writer.COMPACTOR,
            before=before,
            after=snapshot(memory),
        )
        return memory


def _rewrite_refusal(agent: Agent, memory: Memory | None, version_read: int, content: str) -> str:
    if memory is None:
        return "the memory was deleted after the compactor read it"
    if not memory.is_open:
        return "the memory was closed after the compactor read it"
    if memory.version != version_read:
        return "the memory was written after the compactor read it"
    new_bytes = memory_bytes(memory.name, memory.description, content)
    growth = check_growth(agent, old_bytes=memory.bytes, new_bytes=new_bytes)
    if growth:
        return f"the store would grow to {growth.after} bytes, over the cap of {growth.cap}"
    new_tokens = count_tokens(content)
    open_after = open_tokens(agent) - memory.tokens + new_tokens
    if new_tokens > memory.tokens and open_after > agent.max_open_tokens:
        return f"open memories would take {open_after} tokens, over maxOpenTokens {agent.max_open_tokens}"
    return ""
