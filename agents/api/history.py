"""REST views of what an agent has played and sees: its blocks, the
context (now, or as of a block), the checkpoint in force and every one
through time, a memory's history. The store as of a block is the memories
list's (`memories.api`). Reads only: `selectors`, `sending.context` and
`history` answer; the wire shapes are `wire`'s."""

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import selectors
from agents.api import schema as docs
from agents.api.agents import agent_of
from agents.history import as_of, checkpoints
from agents.models import NUMBER_MAX
from agents.sending.context import context_assemble, current_checkpoint
from agents.wire import checkpoint_wire, context_wire
from memories.store import memory_name
from studio.errors import NotFound
from studio.http.api_fields import query
from studio.http.lists import list_out, list_schema
from studio.http.schema import Error, errors


class AtBlockQuery(serializers.Serializer):
    atBlock = serializers.IntegerField(
        min_value=1,
        max_value=NUMBER_MAX,
        required=False,
        help_text="As of this block: as it stood when the block ended. Blocks still being played, "
        "blocks played before the studio kept when each change happened (`history_not_recorded`), and "
        "blocks whose history retention pruned (`history_pruned`) are 409.",
    )


class HistoryQuery(selectors.HISTORY.query()):
    after = serializers.IntegerField(
        min_value=0, max_value=NUMBER_MAX, required=False, help_text="Blocks after this number (or `cursor`)."
    )
    cursor_alias = "after"


class HistoryView(APIView):
    @list_schema(
        "history_list", HistoryQuery, docs.HistoryOut, "An agent's blocks in order, folded ones included", 404
    )
    def get(self, request, name):
        page = selectors.blocks_page(agent=agent_of(request, name), **query(HistoryQuery, request))
        return Response({**page.body(), "nextAfter": page.next_key})


class CheckpointView(APIView):
    @extend_schema(
        operation_id="checkpoint_get",
        responses={200: docs.CheckpointOut, **errors(404)},
        summary="The checkpoint in force",
    )
    def get(self, request, name):
        agent = agent_of(request, name)
        checkpoint = current_checkpoint(agent)
        if checkpoint is None:
            raise NotFound(
                f"Agent '{agent.name}' has no checkpoint yet: one is written at its first compaction.",
                code="no_checkpoint",
            )
        return Response(checkpoint_wire(checkpoint))


class ContextView(APIView):
    @extend_schema(
        operation_id="context_get",
        parameters=[AtBlockQuery],
        responses={200: docs.ContextAtOut, **errors(400, 404, 409)},
        summary="What the next model call would be given — or, with atBlock, what that block's first "
        "model call was given (the player's message included)",
    )
    def get(self, request, name):
        number = query(AtBlockQuery, request).get("atBlock")
        agent = agent_of(request, name)
        if number is None:
            return Response(context_wire(context_assemble(agent)))
        return Response(as_of.context_at(agent, number))


MemoryHistoryQuery = as_of.EVENTS.query()
MemoryHistoryOut = list_out("MemoryHistoryOut", "events", docs.MemoryEventOut)


class MemoryHistoryView(APIView):
    @list_schema(
        "memory_history",
        MemoryHistoryQuery,
        MemoryHistoryOut,
        "A memory's changes, oldest first; a deleted memory's too (those retention pruned are gone: "
        "409 `history_pruned` when none is kept)",
        404,
        409,
    )
    def get(self, request, name, memory):
        agent = agent_of(request, name)
        page = as_of.memory_history_page(agent, memory_name(memory), **query(MemoryHistoryQuery, request))
        return Response(page.body())


CheckpointsQuery = checkpoints.CHECKPOINTS.query()
CheckpointListOut = list_out("CheckpointListOut", "checkpoints", docs.CheckpointBriefOut)


class CheckpointListView(APIView):
    @list_schema(
        "checkpoints_list", CheckpointsQuery, CheckpointListOut, "An agent's checkpoints, newest first", 404
    )
    def get(self, request, name):
        agent = agent_of(request, name)
        return Response(checkpoints.checkpoints_page(agent, **query(CheckpointsQuery, request)).body())


class CheckpointDetailView(APIView):
    @extend_schema(
        operation_id="checkpoint_detail",
        responses={
            200: docs.CheckpointDetailOut,
            **errors(404),
            409: OpenApiResponse(
                Error,
                description="`history_pruned`: retention emptied this checkpoint or the one before it, or "
                "pruned the compactor's rewrites for it; the list still says what it folded and when.",
            ),
        },
        summary="One checkpoint, with its context block and what changed since the one before",
    )
    def get(self, request, name, checkpoint):
        return Response(checkpoints.checkpoint_detail(agent_of(request, name), checkpoint))
