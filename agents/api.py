"""REST views for agents, turns and what an agent has and sees.

Thin: parse, call the domain (`services`, `engine`, `context`), answer
in the wire shapes of `selectors`. Every lookup goes through the key's game, so another game's agent
is a 404.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from studio.api_fields import StrictCharField, StrictSerializer, query, valid
from studio.auth import HasGameKey, IsAdminKey
from studio.errors import NotFound
from studio.lists import list_schema
from studio.schema import errors
from studio.throttles import SendRateThrottle

from . import api_docs as docs
from . import compaction, engine, selectors, services, streams, turn_slot
from .context import context_assemble, current_checkpoint
from .models import CompactionReason, CompactionType, TurnStatus
from .selectors import (
    agent_get,
    agent_stats,
    agent_wire,
    compaction_wire,
    turn_get,
    turn_wire,
    turn_wire_started,
)

# --- request bodies ------------------------------------------------------------------


class MemoryConfigSerializer(StrictSerializer):
    maxOpenTokens = serializers.IntegerField(
        min_value=1, max_value=10_000_000, default=services.DEFAULT_MAX_OPEN_TOKENS
    )


class CompactionConfigSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=CompactionType.values, default=CompactionType.SUMMARIZE)
    maxTokens = serializers.IntegerField(
        min_value=256, max_value=10_000_000, default=services.DEFAULT_MAX_TOKENS
    )


class AgentDefinitionSerializer(StrictSerializer):
    systemPrompt = StrictCharField(allow_blank=True, default="", trim_whitespace=False, max_length=200_000)
    model = StrictCharField(
        required=False,
        max_length=200,
        help_text="`scripted`, `openai:<model>` or `anthropic:<model>`. Absent: the game's default "
        "model (`GET /game`), else the studio's; refused (400 `invalid_definition`) when there is "
        "none. A redefinition without it takes the default as it is then.",
    )
    memory = MemoryConfigSerializer(required=False, allow_null=True)
    compaction = CompactionConfigSerializer(required=False)

    def definition(self) -> services.AgentDefinition:
        data = self.validated_data
        memory = data.get("memory")
        compaction = data.get("compaction") or {}
        return services.AgentDefinition(
            system_prompt=data["systemPrompt"],
            model=data.get("model"),
            memory_enabled=memory is not None,
            max_open_tokens=(memory or {}).get("maxOpenTokens", services.DEFAULT_MAX_OPEN_TOKENS),
            compaction_type=compaction.get("type", CompactionType.SUMMARIZE),
            max_tokens=compaction.get("maxTokens", services.DEFAULT_MAX_TOKENS),
        )


class SendSerializer(StrictSerializer):
    # Its length is the engine's rule (413 past CONTENT_MAX_CHARS).
    content = StrictCharField(trim_whitespace=False)
    transient = serializers.BooleanField(default=False)
    wait = serializers.BooleanField(
        default=True,
        help_text=(
            "false: answer 202 at once with the turn (`queued` or `running`) and a `Location` to "
            "read it at; the send runs on without the client."
        ),
    )
    stream = serializers.BooleanField(
        default=False,
        help_text=(
            "true (or `Accept: text/event-stream`): answer 200 `text/event-stream` with the turn's "
            "events — `turn.started`, `tool_call`, `memory.changed`, `reply.delta` — and last "
            "`turn.finished`, whose data is the body a send answers. The turn runs on if the client "
            "goes, or if the key is revoked meanwhile (the stream then ends with an `error` event). "
            "429 `too_many_streams`, before the turn starts, when the game has "
            "STUDIO_MAX_STREAMS_PER_GAME streams open."
        ),
    )


# --- views -----------------------------------------------------------------------------


def _agent(request, name: str):
    return agent_get(game=request.auth.game, name=name)


AgentsQuery = selectors.AGENTS.query()


class AgentListView(APIView):
    permission_classes = [HasGameKey]

    @list_schema("agents_list", AgentsQuery, docs.AgentListOut, "The game's agents, by name")
    def get(self, request):
        page = selectors.agents_page(game=request.auth.game, **query(AgentsQuery, request))
        return Response(page.body())


class AgentView(APIView):
    def get_permissions(self):
        return [IsAdminKey()] if self.request.method == "DELETE" else [HasGameKey()]

    @extend_schema(
        operation_id="agent_get",
        responses={200: docs.AgentOut, **errors(404)},
        summary="An agent's config and stats",
    )
    def get(self, request, name):
        found = selectors.agent_with_stats(game=request.auth.game, name=name)
        if found is None:
            raise selectors.no_such_agent(name)
        return Response(agent_wire(found.agent, stats=found.stats))

    @extend_schema(
        operation_id="agent_define",
        request=AgentDefinitionSerializer,
        responses={200: docs.AgentOut, 201: docs.AgentOut, **errors(400)},
        summary="Define or redefine an agent",
    )
    def put(self, request, name):
        services.agent_name_check(name)
        serializer = valid(AgentDefinitionSerializer(data=request.data), code="invalid_definition")
        defined = services.agent_construct(
            game=request.auth.game, name=name, definition=serializer.definition()
        )
        stats = defined.stats or agent_stats(defined.agent)
        return Response(agent_wire(defined.agent, stats=stats), status=201 if defined.created else 200)

    @extend_schema(
        operation_id="agent_delete",
        responses={204: None, **errors(403, 404)},
        summary="Remove an agent and all it owns (admin)",
    )
    def delete(self, request, name):
        services.agent_delete(agent=_agent(request, name))
        return Response(status=status.HTTP_204_NO_CONTENT)


IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description=(
        "Up to 200 characters the client makes once per message (a UUID). A repeat with the same key "
        "to the same agent within 24 hours returns the first send's turn — waiting for it if it is "
        "still running — and never runs a second one; the same key with a different body is 422 "
        "`idempotency_mismatch`."
    ),
)


class MessagesView(APIView):
    throttle_classes = [SendRateThrottle]

    def perform_content_negotiation(self, request, force=False):
        # A send may accept only `text/event-stream`: its refusals are JSON all the same.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        operation_id="agent_send",
        request=SendSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            200: docs.TurnEnvelope,
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR, description="With stream: the turn's events, as server-sent events."
            ),
            202: docs.TurnEnvelope,
            **errors(400, 402, 404, 413, 422, 429, 503),
        },
        summary="Send a message; answers when the turn has ended (or at once, with wait: false)",
    )
    def post(self, request, name):
        agent = _agent(request, name)
        data = valid(SendSerializer(data=request.data)).validated_data
        send = {
            "agent": agent,
            "content": data["content"],
            "transient": data["transient"],
            "idempotency_key": request.headers.get("Idempotency-Key"),
        }
        if data["stream"] or "text/event-stream" in request.headers.get("Accept", ""):
            watch = streams.StreamWatch(request.auth)  # before the turn: 429 past the game's streams
            here = streams.SentHere(agent)
            with watch.given_back_on_error():
                turn, is_new = engine.send_start(**send, on_end=here.ended)
            if is_new:
                return streams.sse_response(here.events(turn.uuid), watch=watch, keeps_alive=True)
            here.listener.close()  # a repeat: the earlier send's turn may run elsewhere
            return streams.sse_response(streams.turn_events(agent, turn.uuid), watch=watch)
        if not data["wait"]:
            turn, is_new = engine.send_start(**send)
            return _accepted(request, agent, turn, is_new)
        try:
            sent = engine.send(**send)
        except turn_slot.FollowElsewhere as busy:  # enough requests wait on that turn already
            return _accepted(request, agent, busy.turn, is_new=False)
        return Response({"turn": turn_wire(sent.turn, cost=sent.cost, entries=sent.entries)})


def _accepted(request, agent, turn, is_new: bool) -> Response:
    """202: the turn, and where to read it."""
    location = request.build_absolute_uri(f"/api/v1/agents/{agent.name}/turns/{turn.uuid}")
    return Response({"turn": turn_wire_started(turn, is_new)}, status=202, headers={"Location": location})


class TurnsQuery(selectors.TURNS.query()):
    status = serializers.ChoiceField(choices=TurnStatus.values, required=False)


class TurnListView(APIView):
    @list_schema("turns_list", TurnsQuery, docs.TurnListOut, "An agent's recent turns, newest first", 404)
    def get(self, request, name):
        page = selectors.turns_page(agent=_agent(request, name), **query(TurnsQuery, request))
        return Response(page.body())


class TurnView(APIView):
    @extend_schema(
        operation_id="turn_get", responses={200: docs.TurnEnvelope, **errors(404)}, summary="One turn"
    )
    def get(self, request, name, turn_id):
        return Response({"turn": turn_wire(turn_get(agent=_agent(request, name), turn_id=turn_id))})


class TurnEventsView(APIView):
    content_negotiation_class = streams.EventStreamNegotiation

    @extend_schema(
        operation_id="turn_events",
        responses={
            (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description="Server-sent events."),
            **errors(404, 429),
        },
        summary="Follow a turn as server-sent events",
        description=(
            "The turn's events as `text/event-stream`, each with `event: <type>`, `id: <seq>` and "
            "`data: <JSON>`: first those that already happened (from the agent's buffer of recent "
            "events), then live ones (`turn.started`, `tool_call`, `memory.changed`, `reply.delta`), "
            "and last `turn.finished`, whose data is exactly the body `GET …/turns/{id}` answers "
            '(`{"turn": {…}}`); then the stream ends. A turn that has ended answers its buffered '
            "events and `turn.finished` at once. A comment line is sent every 15 seconds while "
            "nothing happens. A stream whose key is revoked meanwhile ends with an `error` event "
            '(`{"type": "error", "code": "unauthenticated"}`). 429 `too_many_streams` when the '
            "game has STUDIO_MAX_STREAMS_PER_GAME streams open."
        ),
    )
    def get(self, request, name, turn_id):
        agent = _agent(request, name)
        turn = turn_get(agent=agent, turn_id=turn_id)
        return streams.sse_response(
            streams.turn_events(agent, turn.uuid), watch=streams.StreamWatch(request.auth)
        )


class TurnCancelView(APIView):
    @extend_schema(
        operation_id="turn_cancel",
        request=None,
        responses={202: docs.TurnEnvelope, **errors(404, 409)},
        summary="Cancel a live turn",
    )
    def post(self, request, name, turn_id):
        turn = turn_slot.turn_cancel(turn_get(agent=_agent(request, name), turn_id=turn_id))
        return Response({"turn": turn_wire(turn)}, status=202)


class HistoryQuery(selectors.HISTORY.query()):
    after = serializers.IntegerField(
        min_value=0, max_value=2**31, required=False, help_text="Blocks after this number (or `cursor`)."
    )
    cursor_alias = "after"


class HistoryView(APIView):
    @list_schema(
        "history_list", HistoryQuery, docs.HistoryOut, "An agent's blocks in order, folded ones included", 404
    )
    def get(self, request, name):
        page = selectors.blocks_page(agent=_agent(request, name), **query(HistoryQuery, request))
        return Response({**page.body(), "nextAfter": page.next_key})


class ContextView(APIView):
    @extend_schema(
        operation_id="context_get",
        responses={200: docs.ContextOut, **errors(404)},
        summary="What the next model call would be given",
    )
    def get(self, request, name):
        context = context_assemble(_agent(request, name))
        return Response(
            {
                "system": context.system,
                "contextBlock": context.context_block,
                "messages": context.messages,
                "tools": context.tools,
                "tokens": context.tokens(),
            }
        )


class CheckpointView(APIView):
    @extend_schema(
        operation_id="checkpoint_get",
        responses={200: docs.CheckpointOut, **errors(404)},
        summary="The checkpoint in force",
    )
    def get(self, request, name):
        agent = _agent(request, name)
        checkpoint = current_checkpoint(agent)
        if checkpoint is None:
            raise NotFound(
                f"Agent '{agent.name}' has no checkpoint yet: one is written at its first compaction.",
                code="no_checkpoint",
            )
        return Response(
            {
                "kind": checkpoint.kind,
                "throughBlock": checkpoint.through_block,
                "summary": checkpoint.summary,
                "openMemories": [
                    {k: m[k] for k in ("name", "description", "content")} for m in checkpoint.open_memories
                ],
                "closedMemories": checkpoint.closed_memories,
                "contextBlock": checkpoint.context_block,
                "tokens": checkpoint.block_tokens,
                "createdAt": checkpoint.created_at.isoformat(),
            }
        )


class CompactView(APIView):
    @extend_schema(
        operation_id="agent_compact",
        request=None,
        responses={202: docs.CompactionEnvelope, **errors(402, 404)},
        summary="Ask for a compaction now: folds every verbatim block but the newest",
    )
    def post(self, request, name):
        agent = _agent(request, name)
        item = compaction.compaction_request(agent=agent, reason=CompactionReason.MANUAL)
        item.refresh_from_db()
        return Response({"compaction": compaction_wire(item)}, status=202)


CompactionsQuery = selectors.COMPACTIONS.query()


class CompactionListView(APIView):
    @list_schema(
        "compactions_list",
        CompactionsQuery,
        docs.CompactionListOut,
        "An agent's compactions, newest first",
        404,
    )
    def get(self, request, name):
        page = selectors.compactions_page(agent=_agent(request, name), **query(CompactionsQuery, request))
        return Response(page.body())
