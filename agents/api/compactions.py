"""REST views of compactions: asking for one now, and an agent's list.
The compaction itself is `agents.compaction`'s."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import compaction, selectors, services
from agents.api import schema as docs
from agents.api.agents import agent_of
from agents.models import CompactionReason
from agents.wire import compaction_wire
from studio.http.api_fields import query
from studio.http.lists import list_schema
from studio.http.schema import errors


class CompactView(APIView):
    @extend_schema(
        operation_id="agent_compact",
        request=None,
        responses={202: docs.CompactionEnvelope, **errors(402, 404, 409)},
        summary="Ask for a compaction now: folds every verbatim block but the newest",
    )
    def post(self, request, name):
        agent = agent_of(request, name)
        services.replay_copy_check(agent, then="Its replay compacts it where the agent it replays was.")
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
        page = selectors.compactions_page(agent=agent_of(request, name), **query(CompactionsQuery, request))
        return Response(page.body())
