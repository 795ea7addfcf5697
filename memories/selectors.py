"""Reads of an agent's memory store, in the wire shape the API answers with."""

from agents.models import Agent
from studio.http.lists import Keyset, Page, each

from .models import Memory

MEMORIES = Keyset("memories", order="id", default_limit=1000)


def memory_wire(memory: Memory) -> dict:
    return {
        "name": memory.name,
        "description": memory.description,
        "content": memory.content,
        "open": memory.is_open,
        "tokens": memory.tokens,
        "bytes": memory.bytes,
        "version": memory.version,
        "updatedAt": memory.updated_at.isoformat(),
        "updatedBy": memory.updated_by,
    }


def memories_page(*, agent: Agent, after: int | None, limit: int) -> Page:
    """The agent's memories, oldest first."""
    return MEMORIES.page(Memory.objects.filter(agent=agent), after=after, limit=limit, wire=each(memory_wire))
