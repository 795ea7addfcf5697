"""The memory store, read-only: only the agent and the compactor write."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import agent_get
from studio.schema import errors

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


class MemoryOut(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    content = serializers.CharField()
    open = serializers.BooleanField()
    tokens = serializers.IntegerField(help_text="Tokens of the content (what maxOpenTokens budgets).")
    bytes = serializers.IntegerField(help_text="UTF-8 bytes of name + description + content.")
    version = serializers.IntegerField()
    updatedAt = serializers.DateTimeField()
    updatedBy = serializers.ChoiceField(choices=["agent", "compactor"])


class MemoriesOut(serializers.Serializer):
    memories = MemoryOut(many=True)
    openTokens = serializers.IntegerField()
    maxOpenTokens = serializers.IntegerField()
    storeBytes = serializers.IntegerField()
    storeCapBytes = serializers.IntegerField()


class MemoriesView(APIView):
    # GET only: any other method is a 405 — memories are written by the
    # agent's tools and the compactor, never through the API.
    http_method_names = ["get", "head", "options"]

    @extend_schema(
        operation_id="memories_list",
        responses={200: MemoriesOut, **errors(404)},
        summary="The agent's memory store (read-only)",
    )
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
