"""REST views of sends and turns: a message sent (answered when the turn
ends, at once with `wait: false`, or as server-sent events), an agent's
turns, one turn, following one, cancelling one. The send itself is
`sending.engine`'s; the event stream `sending.sse`'s."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import selectors
from agents.api import schema as docs
from agents.api.agents import agent_of
from agents.api.serializers import SendSerializer, ToolResultSerializer
from agents.models import TurnStatus
from agents.selectors import turn_get
from agents.sending import engine, sse, turn_slot, waits
from agents.wire import turn_wire, turn_wire_started
from studio.auth.throttles import SendRateThrottle
from studio.http.api_fields import query, valid
from studio.http.lists import list_schema
from studio.http.schema import errors
from studio.live import event_types
from studio.text import unstorable_reason

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": engine.IDEMPOTENCY_KEY_MAX_CHARS, "pattern": r"\S"},
    OpenApiParameter.HEADER,
    description=(
        "Up to 200 characters the client makes once per message (a UUID). A repeat with the same key "
        "to the same agent within 24 hours returns the first send's turn — waiting for it if it is "
        "still running — and never runs a second one; the same key with a different body is 422 "
        "`idempotency_mismatch`."
    ),
)


# What a turn's server-sent events answer carries, from the event catalogue.
TURN_STREAM = (
    "Each event as `event: <type>`, `id: <seq>` and `data: <JSON>`, the event as a WebSocket "
    "listener gets it (with `seq` and `at` but for `error`):\n\n"
    + event_types.markdown_table(event_types.TURN_STREAM)
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
        agent = agent_of(request, name)
        data = valid(SendSerializer(data=request.data)).validated_data
        send = {
            "agent": agent,
            "content": data["content"],
            "transient": data["transient"],
            "idempotency_key": request.headers.get("Idempotency-Key"),
        }
        if data["stream"] or "text/event-stream" in request.headers.get("Accept", ""):
            watch = sse.StreamWatch(request.auth)  # before the turn: 429 past the game's streams
            here = sse.SentHere(agent)
            with watch.given_back_on_error():
                turn, is_new = engine.send_start(**send, on_end=here.ended)
            interrupted = sse.stream_interrupted(agent.name, str(turn.uuid))
            if is_new:
                return sse.sse_response(
                    here.events(turn.uuid), watch=watch, interrupted=interrupted, keeps_alive=True
                )
            here.listener.close()  # a repeat: the earlier send's turn may run elsewhere
            return sse.sse_response(sse.turn_events(agent, turn.uuid), watch=watch, interrupted=interrupted)
        if not data["wait"]:
            turn, is_new = engine.send_start(**send)
            return _accepted(request, agent, turn, is_new)
        try:
            sent = engine.send(**send)
        except turn_slot.FollowElsewhere as busy:  # enough requests wait on that turn already
            return _accepted(request, agent, busy.turn, is_new=False)
        if not sent.turn.has_ended:  # it waits for the game to answer its tool calls
            return _accepted(request, agent, sent.turn, is_new=False)
        return Response({"turn": turn_wire(sent.turn, cost=sent.cost, entries=sent.entries)})


def _accepted(request, agent, turn, is_new: bool) -> Response:
    """202: the turn, and where to read it."""
    location = request.build_absolute_uri(f"/api/v1/agents/{agent.name}/turns/{turn.uuid}")
    return Response({"turn": turn_wire_started(turn, is_new)}, status=202, headers={"Location": location})


class TurnsQuery(selectors.TURNS.query()):
    status = serializers.ChoiceField(choices=TurnStatus.values, required=False)
    idempotencyKey = serializers.CharField(
        source="idempotency_key",
        required=False,
        trim_whitespace=False,
        max_length=engine.IDEMPOTENCY_KEY_MAX_CHARS,
        help_text="Only the turn a send with this `Idempotency-Key` made (the list then holds one turn at "
        "most): how game code finds a send whose answer never reached it — a `network_error` — and "
        "whether it ran.",
    )

    def validate_idempotencyKey(self, key: str) -> str:
        # What no send could have been made with, and the database cannot compare (NUL).
        reason = unstorable_reason(key)
        if reason:
            raise serializers.ValidationError(f"is no send's Idempotency-Key: {reason}")
        return key


class TurnListView(APIView):
    @list_schema("turns_list", TurnsQuery, docs.TurnListOut, "An agent's recent turns, newest first", 404)
    def get(self, request, name):
        page = selectors.turns_page(agent=agent_of(request, name), **query(TurnsQuery, request))
        return Response(page.body())


class TurnView(APIView):
    @extend_schema(
        operation_id="turn_get", responses={200: docs.TurnEnvelope, **errors(404)}, summary="One turn"
    )
    def get(self, request, name, turn_id):
        return Response({"turn": turn_wire(turn_get(agent=agent_of(request, name), turn_id=turn_id))})


class TurnEventsView(APIView):
    content_negotiation_class = sse.EventStreamNegotiation

    @extend_schema(
        operation_id="turn_events",
        responses={
            (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description=TURN_STREAM),
            **errors(404, 429),
        },
        summary="Follow a turn as server-sent events",
        description=(
            "The turn's events as `text/event-stream`, each with `event: <type>`, `id: <seq>` and "
            "`data: <JSON>`: first those that already happened (from the agent's buffer of recent "
            "events), then live ones, and last `turn.finished`, whose `turn` is what "
            "`GET …/turns/{id}` answered when the turn ended; then the stream ends. A turn that has "
            "ended answers its buffered events and `turn.finished` at once. A comment line is sent "
            "every 15 seconds (STUDIO_SSE_KEEP_ALIVE_SECONDS) while nothing happens, Redis or the "
            "database away included. A stream whose key is revoked meanwhile ends with an `error` "
            'event (`{"type": "error", "code": "unauthenticated"}`); one that can learn nothing more '
            "of its turn (neither Redis nor the database answers) with `stream_interrupted`, saying "
            "where to reconnect. 429 "
            "`too_many_streams` when the game has STUDIO_MAX_STREAMS_PER_GAME streams open."
        ),
    )
    def get(self, request, name, turn_id):
        agent = agent_of(request, name)
        turn = turn_get(agent=agent, turn_id=turn_id)
        return sse.sse_response(
            sse.turn_events(agent, turn.uuid),
            watch=sse.StreamWatch(request.auth),
            interrupted=sse.stream_interrupted(agent.name, str(turn.uuid)),
        )


class ToolResultView(APIView):
    @extend_schema(
        operation_id="turn_tool_result",
        request=ToolResultSerializer,
        responses={200: docs.TurnEnvelope, **errors(400, 404, 409, 413)},
        summary="Answer a call of one of the game's tools",
        description=(
            "The game's answer to a call its turn waits on (`tool.requested`, the turn's "
            "`pendingToolCalls`): `{callId, result}` or `{callId, error}`. It is recorded beside the call, "
            "`tool.answered` is sent, and once every call of that model step has its answer the turn goes "
            "on. Answers the turn as it stands then (`waiting`, or `running` again). 409 `turn_ended`, "
            "`unknown_call` or `call_answered` change nothing."
        ),
    )
    def post(self, request, name, turn_id):
        agent = agent_of(request, name)
        data = valid(ToolResultSerializer(data=request.data)).validated_data
        turn = engine.tool_result_post(
            agent=agent,
            turn_id=turn_get(agent=agent, turn_id=turn_id).uuid,
            call_id=data["callId"],
            result=data.get("result", waits.NO_RESULT),
            error=data.get("error"),
        )
        return Response({"turn": turn_wire(turn)})


class TurnCancelView(APIView):
    @extend_schema(
        operation_id="turn_cancel",
        request=None,
        responses={202: docs.TurnEnvelope, **errors(404, 409)},
        summary="Cancel a live turn",
    )
    def post(self, request, name, turn_id):
        turn = turn_slot.turn_cancel(turn_get(agent=agent_of(request, name), turn_id=turn_id))
        return Response({"turn": turn_wire(turn)}, status=202)
