"""REST views of agents themselves: the game's list, one agent's config
and stats, defining (PUT, with If-Match against its ETag), its config's
revisions, removing, and copies of one — a fork from a block, its agent
file (export) and a new agent from a file (import).

Thin, as every view here: parse, call the domain, answer in `wire`'s
shapes. Every lookup goes through the key's game (`agent_of`), so another
game's agent is a 404.
"""

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import selectors, services
from agents.api import schema as docs
from agents.api.file_format import AgentFile, agent_file_read
from agents.api.serializers import AgentDefinitionSerializer, ForkSerializer
from agents.history import export
from agents.history.imports import ImportedBy, agent_fork, agent_import
from agents.models import Agent, DefinedVia
from agents.selectors import agent_get, agent_stats, revision_latest
from agents.services import revision_etag
from agents.wire import agent_wire, revision_detail_wire
from studio.auth.authentication import HasGameKey, IsAdminKey
from studio.auth.keys import apikey_named
from studio.auth.throttles import SendRateThrottle
from studio.http.api_fields import query, valid
from studio.http.lists import list_schema
from studio.http.params import whole_number
from studio.http.schema import Error, errors


def agent_of(request, name: str) -> Agent:
    """The key's game's agent `name`; 404 `agent_not_found` otherwise."""
    return agent_get(game=request.auth.game, name=name)


# --- the list, one agent ----------------------------------------------------------------

AgentsQuery = selectors.AGENTS.query()
# A response header: the agent's config revision.
ETAG = OpenApiParameter(
    "ETag",
    str,
    OpenApiParameter.HEADER,
    description='The agent\'s config revision (`revision.number`), quoted: `"3"`.',
    response=[200, 201],
)


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
        parameters=[ETAG],
        responses={200: docs.AgentOut, **errors(404)},
        summary="An agent's config and stats",
        description="The ETag names the agent's config revision (`revision.number`), for `If-Match` on PUT.",
    )
    def get(self, request, name):
        found = selectors.agent_with_stats(game=request.auth.game, name=name)
        if found is None:
            raise selectors.no_such_agent(name)
        body = agent_wire(found.agent, revision=found.revision, stats=found.stats)
        return Response(body, headers={"ETag": revision_etag(found.agent.revision)})

    @extend_schema(
        operation_id="agent_define",
        request=AgentDefinitionSerializer,
        parameters=[
            OpenApiParameter(
                "name",
                {"type": "string", "pattern": services.NAME_PATTERN.pattern},
                OpenApiParameter.PATH,
                description="1–64 characters from A–Z, a–z, 0–9, '_' and '-'.",
            ),
            OpenApiParameter(
                "If-Match",
                str,
                OpenApiParameter.HEADER,
                description='The ETag of the revision last read (`"3"`), or several: the definition is '
                "written only if the agent is still at it (else 412 `definition_changed`). `*` or absent: "
                "whatever it is at.",
            ),
            ETAG,
        ],
        responses={
            200: docs.AgentOut,
            201: docs.AgentOut,
            **errors(400),
            412: OpenApiResponse(
                Error,
                description="`definition_changed`: If-Match names a revision the agent is no longer at "
                "(or there is no such agent); the message says which it is at, and who defined it.",
            ),
            403: OpenApiResponse(
                Error, description="`quota_exceeded`: a new agent past STUDIO_MAX_AGENTS_PER_GAME."
            ),
            429: OpenApiResponse(
                Error,
                description="`rate_limited`: the game's definitions that write (new agents, changed configs, "
                "forks, imports) past STUDIO_DEFINITION_RATE; wait as Retry-After says. One that changes "
                "nothing is never refused.",
            ),
        },
        summary="Define or redefine an agent",
        description=(
            "The body is the whole definition, as the spec's `new Agent(name, options)`: a field left "
            "out takes its default (leaving out `memory` turns memory off; leaving out `compaction` "
            "means summarize at the default maxTokens). Sending the same definition again changes "
            "nothing and writes nothing (200), so game code may define its agents on every start; "
            "a definition that writes is paced per game (STUDIO_DEFINITION_RATE) and kept as the "
            "agent's next revision, recorded as defined by this key through the API. With If-Match, "
            "only over the revision named."
        ),
    )
    def put(self, request, name):
        services.agent_name_check(name)
        serializer = valid(AgentDefinitionSerializer(data=request.data), code="invalid_definition")
        defined = services.agent_construct(
            game=request.auth.game,
            name=name,
            definition=serializer.definition(),
            by=request.auth,
            via=DefinedVia.API,
            if_match=if_match_tags(request.headers.get("If-Match")),
        )
        stats = defined.stats or agent_stats(defined.agent)
        body = agent_wire(defined.agent, revision=defined.revision, stats=stats)
        headers = {"ETag": revision_etag(defined.agent.revision)}
        return Response(body, status=201 if defined.created else 200, headers=headers)

    @extend_schema(
        operation_id="agent_delete",
        responses={204: None, **errors(403, 404)},
        summary="Remove an agent and all it owns (admin)",
    )
    def delete(self, request, name):
        services.agent_delete(agent=agent_of(request, name))
        return Response(status=status.HTTP_204_NO_CONTENT)


def if_match_tags(header: str | None) -> frozenset[str] | None:
    """The entity tags an If-Match header names, without their quotes; None
    when it is absent or `*` (any revision). A weak tag (`W/"3"`) never
    matches (If-Match compares strongly), and neither does an empty list."""
    if header is None or header.strip() == "*":
        return None
    tags = set()
    for item in header.split(","):
        item = item.strip()
        if item.startswith('"') and item.endswith('"') and len(item) >= 2:
            tags.add(item[1:-1])
        elif item and not item.startswith("W/"):
            tags.add(item)  # unquoted: read as the tag it would quote
    return frozenset(tags)


# --- revisions of the config ----------------------------------------------------------------

RevisionsQuery = selectors.REVISIONS.query()


class RevisionListView(APIView):
    @list_schema(
        "agent_revisions_list",
        RevisionsQuery,
        docs.RevisionListOut,
        "The revisions of the agent's config, newest first: who defined each, from where, when",
        404,
    )
    def get(self, request, name):
        page = selectors.revisions_page(agent=agent_of(request, name), **query(RevisionsQuery, request))
        return Response(page.body())


class RevisionView(APIView):
    @extend_schema(
        operation_id="agent_revision_get",
        responses={200: docs.RevisionDetailOut, **errors(404)},
        summary="One revision of the agent's config, with the definition it set",
    )
    def get(self, request, name, number):
        agent = agent_of(request, name)
        found = whole_number(number, max_digits=18)
        if found is None:
            raise selectors.no_such_revision(agent, number)
        return Response(revision_detail_wire(selectors.revision_get(agent=agent, number=found)))


# --- copies: fork, export, import ----------------------------------------------------------


def _created(agent) -> Response:
    body = agent_wire(agent, revision=revision_latest(agent), stats=agent_stats(agent))
    headers = {"Location": f"/api/v1/agents/{agent.name}", "ETag": revision_etag(agent.revision)}
    return Response(body, status=201, headers=headers)


def agent_file_response(agent, *, render, separators: tuple[str, str]) -> StreamingHttpResponse:
    """The agent's file, streamed as it is read (`export.Export`):
    in the bytes `render` makes of a whole document with `separators`."""
    chunks = export.agent_file(agent).chunks(render=render, separators=separators)
    return StreamingHttpResponse(_in_request_thread(chunks), content_type="application/json")


async def _in_request_thread(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    # Each batch is read in the request's own thread, on its database
    # connection, which Django closes when the response has been sent.
    step = sync_to_async(next, thread_sensitive=True)
    while (chunk := await step(chunks, None)) is not None:
        yield chunk


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
                "agent's config now — open content reaching half of maxTokens, one memory (open or closed) larger "
                "than the whole of maxOpenTokens (once closed, it could never be opened), the store past the cap — the message says which "
                "memory and by how much.",
            ),
        },
        summary="A new agent with the same config, as this one stood when block atBlock ended",
    )
    def post(self, request, name):
        agent = agent_of(request, name)
        data = valid(ForkSerializer(data=request.data)).validated_data
        forked = agent_fork(agent=agent, name=data["name"], at_block=data["atBlock"], by=request.auth)
        return _created(forked)


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
        return agent_file_response(
            agent_of(request, name), render=JSONRenderer().render, separators=(",", ":")
        )


class ImportQuery(serializers.Serializer):
    fileName = serializers.CharField(
        required=False,
        max_length=255,
        help_text="The file's name, for the `imported` change of each memory it installs (\"Imported by "
        'API key sk_3f… (label) from \'dm.json\'."); without it, the note says "a file posted to the API".',
    )


class ImportView(APIView):
    permission_classes = [IsAdminKey]
    throttle_classes = [SendRateThrottle]

    @extend_schema(
        operation_id="agent_import",
        parameters=[ImportQuery],
        request=AgentFile,
        responses={
            201: docs.AgentOut,
            **errors(403, 409, 413, 429),
            400: OpenApiResponse(
                Error,
                description="`invalid_agent_file`, naming the place (`memories[2]: …`): a file that is not "
                "one, whose parts do not agree, whose text passes a length limit, or whose store breaks a rule "
                "of the store under its config (open content reaching half of maxTokens, a memory, open or closed, "
                "larger than the whole of maxOpenTokens, the store past the cap); `invalid_name`.",
            ),
        },
        summary="A new agent in this key's game from an agent file (admin)",
    )
    def post(self, request):
        file_name = query(ImportQuery, request).get("fileName")
        # Before the body is read: a game with no room for an agent is
        # refused without the cost of checking its file.
        services.agent_room_check(request.auth.game, lock=False)
        document = agent_file_read(request.data)
        by = ImportedBy.named(apikey_named(request.auth), file_name, definer=request.auth)
        return _created(agent_import(game=request.auth.game, document=document, by=by))
