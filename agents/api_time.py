"""REST views for an agent through time: the context as of a block, a
memory's history, checkpoints with what each changed, a fork from a block,
and agent files (export, import). The store as of a block is the memories
list's (`memories.api`).

Thin: parse, call `history_reads` (reads) or `agent_files` (writes), answer.
"""

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.validators import RegexValidator
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from studio.api_fields import StrictCharField, StrictSerializer, query, valid
from studio.auth import IsAdminKey
from studio.lists import list_out, list_schema
from studio.schema import Error, errors
from studio.throttles import SendRateThrottle

from . import agent_files, api, history_reads, services
from . import api_docs as docs
from .file_format import AgentFile
from .selectors import agent_get, agent_stats, agent_wire
from .services import NAME_PATTERN

BIG = 2**31 - 1


class AtBlockQuery(serializers.Serializer):
    atBlock = serializers.IntegerField(
        min_value=1,
        max_value=BIG,
        required=False,
        help_text="As of this block: as it stood when the block ended. Blocks still being played, "
        "blocks played before the studio kept when each change happened (`history_not_recorded`), and "
        "blocks whose history retention pruned (`history_pruned`) are 409.",
    )


def _agent(request, name: str):
    return agent_get(game=request.auth.game, name=name)


def agent_file_response(agent, *, render, separators: tuple[str, str]) -> StreamingHttpResponse:
    """The agent's file, streamed as it is read (`history_reads.AgentFile`):
    in the bytes `render` makes of a whole document with `separators`."""
    chunks = history_reads.agent_file(agent).chunks(render=render, separators=separators)
    return StreamingHttpResponse(_in_request_thread(chunks), content_type="application/json")


async def _in_request_thread(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    # Each batch is read in the request's own thread, on its database
    # connection, which Django closes when the response has been sent.
    step = sync_to_async(next, thread_sensitive=True)
    while (chunk := await step(chunks, None)) is not None:
        yield chunk


def _created(agent) -> Response:
    body = agent_wire(agent, stats=agent_stats(agent))
    return Response(body, status=201, headers={"Location": f"/api/v1/agents/{agent.name}"})


# --- response shapes, for the schema --------------------------------------------------------


class CheckpointBriefOut(serializers.Serializer):
    id = serializers.IntegerField(help_text="Its place among the agent's checkpoints: 1 for the first.")
    kind = serializers.ChoiceField(choices=["compaction", "forced"])
    throughBlock = serializers.IntegerField(help_text="It folds the blocks up to this one.")
    fromBlock = serializers.IntegerField(
        allow_null=True,
        help_text="The first block at whose end it was in force; null for a checkpoint written before "
        "the studio kept that.",
    )
    tokens = serializers.IntegerField(help_text="Of its context block.")
    createdAt = serializers.DateTimeField()


class ContextAtOut(docs.ContextOut):
    block = serializers.IntegerField(required=False, help_text="With atBlock: the block.")
    checkpoint = CheckpointBriefOut(
        required=False, allow_null=True, help_text="With atBlock: the checkpoint in force then, if any."
    )


class MemoryEventOut(serializers.Serializer):
    name = serializers.CharField()
    change = serializers.ChoiceField(choices=["created", "updated", "opened", "closed", "deleted", "dropped"])
    by = serializers.ChoiceField(choices=["agent", "compactor"])
    turnId = serializers.UUIDField(allow_null=True)
    block = serializers.IntegerField(
        allow_null=True,
        help_text="The first block whose end shows the change: an agent's change, its turn's block; a "
        "compactor's, the block it ran in or the next one. Null for a compactor's change made before "
        "the studio kept that.",
    )
    checkpoint = serializers.IntegerField(allow_null=True, help_text="A compactor's change: its checkpoint.")
    before = serializers.JSONField(allow_null=True, help_text="description, content, open, version")
    after = serializers.JSONField(allow_null=True, help_text="null once deleted; a dropped rewrite's content")
    note = serializers.CharField(allow_null=True, help_text="Why a rewrite was dropped, and the like.")
    at = serializers.DateTimeField()


class DiffLineOut(serializers.Serializer):
    op = serializers.ChoiceField(
        choices=["same", "removed", "added", "replaced"],
        help_text="`replaced`: the only change of a diff too large to compare line by line — over "
        f"{history_reads.DIFF_MAX_LINES:,} lines (both sides together), or over "
        f"{history_reads.DIFF_MAX_COMPARISONS:,} comparisons of a line with another (texts of many repeated "
        "lines), or past what one read's diffs may compare in all "
        f"({history_reads.DIFF_READ_MAX_COMPARISONS:,}). The texts are `before` and `after`.",
    )
    text = serializers.CharField(required=False, help_text="The line; absent for `replaced`.")
    beforeChars = serializers.IntegerField(required=False, help_text="`replaced`: characters before.")
    afterChars = serializers.IntegerField(required=False, help_text="`replaced`: characters after.")


class SummaryChangeOut(serializers.Serializer):
    before = serializers.CharField(allow_null=True, help_text="The previous checkpoint's summary.")
    after = serializers.CharField(allow_null=True)
    lines = DiffLineOut(many=True)


class RewriteOut(serializers.Serializer):
    name = serializers.CharField()
    applied = serializers.BooleanField(help_text="false: the rewrite was dropped (see note).")
    before = serializers.CharField(allow_null=True)
    after = serializers.CharField(allow_null=True)
    note = serializers.CharField(allow_null=True)
    lines = DiffLineOut(many=True)


class CheckpointChangesOut(serializers.Serializer):
    summary = SummaryChangeOut()
    rewrites = RewriteOut(
        many=True,
        allow_null=True,
        help_text="Each open memory the compactor rewrote for it; null for a checkpoint written before "
        "the studio kept that.",
    )


class CheckpointDetailOut(CheckpointBriefOut, docs.CheckpointOut):
    previous = serializers.IntegerField(allow_null=True)
    changes = CheckpointChangesOut(help_text="Against the previous checkpoint.")


# --- views ------------------------------------------------------------------------------------


class ContextView(api.ContextView):
    @extend_schema(
        operation_id="context_get",
        parameters=[AtBlockQuery],
        responses={200: ContextAtOut, **errors(400, 404, 409)},
        summary="What the next model call would be given — or, with atBlock, what that block's first "
        "model call was given (the player's message included)",
    )
    def get(self, request, name):
        number = query(AtBlockQuery, request).get("atBlock")
        if number is None:
            return super().get(request, name)
        return Response(history_reads.context_at(_agent(request, name), number))


HistoryQuery = history_reads.EVENTS.query()
MemoryHistoryOut = list_out("MemoryHistoryOut", "events", MemoryEventOut)


class MemoryHistoryView(APIView):
    @list_schema(
        "memory_history",
        HistoryQuery,
        MemoryHistoryOut,
        "A memory's changes, oldest first; a deleted memory's too (those retention pruned are gone: "
        "409 `history_pruned` when none is kept)",
        404,
        409,
    )
    def get(self, request, name, memory):
        agent = _agent(request, name)
        page = history_reads.memory_history_page(agent, memory, **query(HistoryQuery, request))
        return Response(page.body())


CheckpointsQuery = history_reads.CHECKPOINTS.query()
CheckpointListOut = list_out("CheckpointListOut", "checkpoints", CheckpointBriefOut)


class CheckpointListView(APIView):
    @list_schema(
        "checkpoints_list", CheckpointsQuery, CheckpointListOut, "An agent's checkpoints, newest first", 404
    )
    def get(self, request, name):
        agent = _agent(request, name)
        return Response(history_reads.checkpoints_page(agent, **query(CheckpointsQuery, request)).body())


class CheckpointDetailView(APIView):
    @extend_schema(
        operation_id="checkpoint_detail",
        responses={
            200: CheckpointDetailOut,
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
        return Response(history_reads.checkpoint_detail(_agent(request, name), checkpoint))


class ForkSerializer(StrictSerializer):
    name = StrictCharField(
        max_length=64,
        validators=[RegexValidator(NAME_PATTERN, "use 1–64 characters from A–Z, a–z, 0–9, '_' and '-'")],
        help_text="The new agent's name.",
    )
    atBlock = serializers.IntegerField(min_value=1, max_value=BIG)


class ForkView(APIView):
    # A fork copies a whole history: it is paced like a send.
    throttle_classes = [SendRateThrottle]

    @extend_schema(
        operation_id="agent_fork",
        request=ForkSerializer,
        responses={
            201: docs.AgentOut,
            **errors(400, 403, 404, 429),
            409: OpenApiResponse(
                Error,
                description="`name_taken`; `block_running`, `history_not_recorded` or `history_pruned` for "
                "the block (a fork copies the whole history to it: once retention pruned any, none is made); "
                "`store_does_not_fit` when the store as of the block breaks a rule of the store under the "
                "agent's config now — open content reaching half of maxTokens, a closed memory larger than "
                "the whole of maxOpenTokens (it could never be opened), the store past the cap — the message says which "
                "memory and by how much.",
            ),
        },
        summary="A new agent with the same config, as this one stood when block atBlock ended",
    )
    def post(self, request, name):
        agent = _agent(request, name)
        data = valid(ForkSerializer(data=request.data)).validated_data
        return _created(agent_files.agent_fork(agent=agent, name=data["name"], at_block=data["atBlock"]))


class ExportView(APIView):
    @extend_schema(
        operation_id="agent_export",
        responses={
            200: AgentFile,
            **errors(404),
            409: OpenApiResponse(
                Error,
                description="`history_pruned`: a file carries the whole history, and retention pruned some.",
            ),
        },
        summary="The agent as one JSON document (an agent file)",
    )
    def get(self, request, name):
        # As DRF's JSON renderer writes a whole document.
        return agent_file_response(_agent(request, name), render=JSONRenderer().render, separators=(",", ":"))


class ImportView(APIView):
    permission_classes = [IsAdminKey]
    throttle_classes = [SendRateThrottle]

    @extend_schema(
        operation_id="agent_import",
        request=AgentFile,
        responses={
            201: docs.AgentOut,
            **errors(403, 409, 413, 429),
            400: OpenApiResponse(
                Error,
                description="`invalid_agent_file`, naming the place (`memories[2]: …`): a file that is not "
                "one, whose parts do not agree, whose text passes a length limit, or whose store breaks a rule "
                "of the store under its config (open content reaching half of maxTokens, a closed memory "
                "larger than the whole of maxOpenTokens, the store past the cap); `invalid_name`.",
            ),
        },
        summary="A new agent in this key's game from an agent file (admin)",
    )
    def post(self, request):
        # Before the body is read: a game with no room for an agent is
        # refused without the cost of checking its file.
        services.agent_room_check(request.auth.game, lock=False)
        document = valid(AgentFile(data=request.data), code="invalid_agent_file").validated_data
        return _created(agent_files.agent_import(game=request.auth.game, document=document))
