"""The memory store, read-only: only the agent and the compactor write."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.services import agent_get

from . import store
from .models import Memory


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


class MemoriesView(APIView):
    # GET only: any other method is a 405 — memories are written by the
    # agent's tools and the compactor, never through the API.
    http_method_names = ["get", "head", "options"]

    @extend_schema(responses=OpenApiTypes.OBJECT, summary="The agent's memory store (read-only)")
    def get(self, request, name):
        agent = agent_get(game=request.auth.game, name=name)
        memories = list(Memory.objects.filter(agent=agent).order_by("id"))
        return Response(
            {
                "memories": [memory_wire(m) for m in memories],
                "openTokens": sum(m.tokens for m in memories if m.is_open),
                "maxOpenTokens": agent.max_open_tokens,
                "storeBytes": sum(m.bytes for m in memories),
                "storeCapBytes": store.store_cap_bytes(),
            }
        )
