"""REST views of replays: starting one, an agent's list, one replay side
by side, cancelling one, deleting one. The replay itself is
`agents.replays`'; what it shows, `selectors`'."""

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import replays, selectors
from agents.api import schema as docs
from agents.api.agents import agent_of
from agents.api.serializers import ReplaySerializer
from agents.models import NUMBER_MAX
from agents.replays import REPLAY_MAX_BLOCKS
from studio.auth.throttles import SendRateThrottle
from studio.http.api_fields import query, valid
from studio.http.lists import list_schema
from studio.http.schema import Error, errors

ReplaysQuery = selectors.REPLAYS.query()


class ReplayQuery(serializers.Serializer):
    memoriesAt = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=NUMBER_MAX,
        help_text="Compare the two stores as this block left them (fromBlock - 1, or a block played) "
        "rather than as the last block played did. Once the replay has ended and its copy is removed, only "
        "the last block played.",
    )


def _replay_body(replay, **options) -> dict:
    return {"replay": selectors.replay_detail(replay, **options)}


class ReplayListView(APIView):
    def get_throttles(self):
        # Starting one copies the agent's history: it is paced like a send.
        return [SendRateThrottle()] if self.request.method == "POST" else []

    @list_schema("replays_list", ReplaysQuery, docs.ReplayListOut, "An agent's replays, newest first", 404)
    def get(self, request, name):
        page = selectors.replays_page(agent=agent_of(request, name), **query(ReplaysQuery, request))
        return Response(page.body())

    @extend_schema(
        operation_id="replay_start",
        request=ReplaySerializer,
        responses={
            202: docs.ReplayDetailEnvelope,
            **errors(402, 404, 429),
            400: OpenApiResponse(
                Error,
                description=f"`invalid_request` (through before fromBlock, or more than {REPLAY_MAX_BLOCKS} blocks); "
                "`invalid_definition` for changes a definition could not make.",
            ),
            409: OpenApiResponse(
                Error,
                description="`replay_running` (one replay at a time per agent); `block_running`, "
                "`history_not_recorded` or `history_pruned` for the blocks; `store_does_not_fit` when the "
                "store as of block fromBlock - 1 breaks a rule of the store under the changed config; "
                "`replay_copy` for a replay's copy.",
            ),
        },
        summary="Replay the player's messages of blocks fromBlock..through against a changed definition",
        description="Answers at once (202, with `Location`); the replay runs in the background, sending each "
        "block's player message, in order, to a copy of the agent as it stood when block fromBlock - 1 ended, "
        "with the changes made to its definition — as real sends, charged to the game. The agent itself is "
        "only read. Events on the agent's stream: `replay.progress` after each block, `replay.finished` at "
        "the end.",
    )
    def post(self, request, name):
        agent = agent_of(request, name)
        body = ReplaySerializer(data=request.data)
        if not body.is_valid():
            valid(body, code="invalid_definition" if "definition" in body.errors else "invalid_request")
        data = body.validated_data
        replay = replays.replay_start(
            agent=agent,
            from_block=data["fromBlock"],
            through=data.get("through"),
            changes=data.get("definition", {}),
        )
        replay = selectors.replay_get(agent=agent, replay_id=replay.uuid)  # as it stands: inline, it has run
        location = request.build_absolute_uri(f"/api/v1/agents/{agent.name}/replays/{replay.uuid}")
        return Response(_replay_body(replay), status=status.HTTP_202_ACCEPTED, headers={"Location": location})


class ReplayView(APIView):
    @extend_schema(
        operation_id="replay_get",
        parameters=[ReplayQuery],
        responses={200: docs.ReplayDetailEnvelope, **errors(400, 404)},
        summary="One replay: its progress, each block side by side, and the two stores compared",
    )
    def get(self, request, name, replay_id):
        replay = selectors.replay_get(agent=agent_of(request, name), replay_id=replay_id)
        options = query(ReplayQuery, request)
        return Response(_replay_body(replay, memories_at=options.get("memoriesAt")))

    @extend_schema(
        operation_id="replay_delete",
        responses={
            204: None,
            **errors(404),
            409: OpenApiResponse(
                Error,
                description="`replay_running` while it is queued or running (cancel it first); `agent_busy` "
                "while a model call of its copy's is still to be charged.",
            ),
        },
        summary="Delete an ended replay, with its copy if it still has one",
    )
    def delete(self, request, name, replay_id):
        replays.replay_delete(selectors.replay_get(agent=agent_of(request, name), replay_id=replay_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ReplayCancelView(APIView):
    @extend_schema(
        operation_id="replay_cancel",
        request=None,
        responses={202: docs.ReplayDetailEnvelope, **errors(404, 409)},
        summary="Cancel a live replay; the blocks it played stay, to be compared",
    )
    def post(self, request, name, replay_id):
        agent = agent_of(request, name)
        replays.replay_cancel(selectors.replay_get(agent=agent, replay_id=replay_id))
        replay = selectors.replay_get(agent=agent, replay_id=replay_id)
        return Response(_replay_body(replay), status=status.HTTP_202_ACCEPTED)
