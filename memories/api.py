"""The memory store, read-only: only the agent and the compactor write."""

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.api.history import AtBlockQuery
from agents.history.as_of import memories_at_block
from agents.selectors import agent_get, store_totals
from studio.http.api_fields import query
from studio.http.lists import list_out, list_schema

from . import store
from .selectors import MEMORIES, memories_page


class MemoryOut(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    content = serializers.CharField()
    open = serializers.BooleanField()
    tokens = serializers.IntegerField(help_text="Tokens of the content (what maxOpenTokens budgets).")
    bytes = serializers.IntegerField(help_text="UTF-8 bytes of name + description + content.")
    version = serializers.IntegerField()
    updatedAt = serializers.DateTimeField()
    updatedBy = serializers.ChoiceField(
        choices=["agent", "compactor", "import", "file"],
        help_text="Who wrote it last: the agent, the compactor, or an import that installed it as a file held "
        "it — or, as of a block before that import, the file (what it tells of, made before the import).",
    )


MemoriesOut = list_out(
    "MemoriesOut",
    "memories",
    MemoryOut,
    memoryEnabled=serializers.BooleanField(
        help_text="false: memory is off for the agent (its definition has no `memory`): it has no memory "
        "tools, its checkpoints show no memories and the compactor keeps none — the store is kept as it "
        "is, unseen, and comes back when memory is turned on again."
    ),
    openTokens=serializers.IntegerField(help_text="Of the whole store, not only this page."),
    maxOpenTokens=serializers.IntegerField(),
    storeBytes=serializers.IntegerField(help_text="Of the whole store, not only this page."),
    storeCapBytes=serializers.IntegerField(),
)


class MemoriesQuery(AtBlockQuery, MEMORIES.query()):
    pass


class MemoriesView(APIView):
    # GET only: any other method is a 405 — memories are written by the
    # agent's tools and the compactor, never through the API.
    http_method_names = ["get", "head", "options"]

    @list_schema(
        "memories_list",
        MemoriesQuery,
        MemoriesOut,
        "The agent's memory store (read-only), oldest memory first — or, with atBlock, the store as "
        "that block left it",
        404,
        409,
    )
    def get(self, request, name):
        agent = agent_get(game=request.auth.game, name=name)
        params = query(MemoriesQuery, request)
        number = params.pop("atBlock", None)
        if number is not None:
            return Response(memories_at_block(agent, number, **params))
        page = memories_page(agent=agent, **params)
        return Response(
            {
                **page.body(),
                "memoryEnabled": agent.memory_enabled,
                **store_totals(agent),
                "maxOpenTokens": agent.max_open_tokens,
                "storeCapBytes": store.store_cap_bytes(),
            }
        )
