"""The agents app's routes: the API's (under /api/v1/) and the pages'
(under /studio/<game>/)."""

from django.urls import path, re_path

from agents.api import agents, compactions, history, replays, turns
from agents.pages import history as history_pages
from agents.pages import replays as replay_pages
from agents.pages import revisions as revision_pages
from agents.pages import views as pages

# Agent names are validated by the views (a bad name on PUT is a 400 with a
# reason, not a bare 404), so the routes take any single path segment.
AGENT = r"^agents/(?P<name>[^/]+)"
TURN = AGENT + r"/turns/(?P<turn_id>[^/]+)"
REPLAY = AGENT + r"/replays/(?P<replay_id>[^/]+)"

api = [
    path("agents", agents.AgentListView.as_view()),
    # Before the agent route: "import" is not an agent name.
    path("agents/import", agents.ImportView.as_view()),
    re_path(AGENT + r"$", agents.AgentView.as_view()),
    re_path(AGENT + r"/fork$", agents.ForkView.as_view()),
    re_path(AGENT + r"/export$", agents.ExportView.as_view()),
    re_path(AGENT + r"/revisions$", agents.RevisionListView.as_view()),
    re_path(AGENT + r"/revisions/(?P<number>[^/]+)$", agents.RevisionView.as_view()),
    re_path(AGENT + r"/messages$", turns.MessagesView.as_view()),
    re_path(AGENT + r"/turns$", turns.TurnListView.as_view()),
    re_path(TURN + r"$", turns.TurnView.as_view()),
    re_path(TURN + r"/events$", turns.TurnEventsView.as_view()),
    re_path(TURN + r"/cancel$", turns.TurnCancelView.as_view()),
    re_path(TURN + r"/tool-results$", turns.ToolResultView.as_view()),
    re_path(AGENT + r"/history$", history.HistoryView.as_view()),
    re_path(AGENT + r"/context$", history.ContextView.as_view()),
    re_path(AGENT + r"/checkpoint$", history.CheckpointView.as_view()),
    re_path(AGENT + r"/checkpoints$", history.CheckpointListView.as_view()),
    re_path(AGENT + r"/checkpoints/(?P<checkpoint>[^/]+)$", history.CheckpointDetailView.as_view()),
    # Greedy: a memory name may hold a '/'.
    re_path(AGENT + r"/memories/(?P<memory>.+)/history$", history.MemoryHistoryView.as_view()),
    re_path(AGENT + r"/compact$", compactions.CompactView.as_view()),
    re_path(AGENT + r"/compactions$", compactions.CompactionListView.as_view()),
    re_path(AGENT + r"/replays$", replays.ReplayListView.as_view()),
    re_path(REPLAY + r"$", replays.ReplayView.as_view()),
    re_path(REPLAY + r"/cancel$", replays.ReplayCancelView.as_view()),
]

pages = [
    path("agents/", pages.agents_list, name="agents-list"),
    # Before the agent page: "import" is no agent's name.
    path("agents/import/", history_pages.agents_import, name="agents-import"),
    # Not under agents/: any name there may be an agent's.
    path("default-model/", pages.default_model_set, name="game-default-model"),
    path("agents/<str:name>/", pages.agent_page, name="agent-page"),
    path("agents/<str:name>/send/", pages.agent_send, name="agent-send"),
    path("agents/<str:name>/delete/", pages.agent_delete, name="agent-delete"),
    path("agents/<str:name>/compact/", pages.agent_compact, name="agent-compact"),
    path("agents/<str:name>/turns/<uuid:turn_id>/cancel/", pages.turn_cancel, name="turn-cancel"),
    path("agents/<str:name>/blocks/<int:number>/", history_pages.agent_at_block, name="agent-at-block"),
    path(
        "agents/<str:name>/blocks/<int:number>/replay/", replay_pages.replay_start, name="agent-replay-start"
    ),
    path("agents/<str:name>/checkpoints/", history_pages.agent_checkpoints, name="agent-checkpoints"),
    path("agents/<str:name>/replays/", replay_pages.replay_list, name="agent-replays"),
    path("agents/<str:name>/replays/<uuid:replay_id>/", replay_pages.replay_page, name="agent-replay"),
    path(
        "agents/<str:name>/replays/<uuid:replay_id>/cancel/", replay_pages.replay_cancel, name="replay-cancel"
    ),
    path("agents/<str:name>/replays/<uuid:replay_id>/use/", replay_pages.replay_use, name="replay-use"),
    path("agents/<str:name>/export/", history_pages.agent_export, name="agent-export"),
    path("agents/<str:name>/revisions/", revision_pages.agent_revisions, name="agent-revisions"),
    path(
        "agents/<str:name>/revisions/<int:number>/restore/",
        revision_pages.revision_restore,
        name="agent-revision-restore",
    ),
]
