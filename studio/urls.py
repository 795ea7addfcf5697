from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from agents import api as agents_api
from agents import api_time
from billing import api as billing_api
from memories import api as memories_api

from . import api, pages, views
from .errors import json_error_view
from .schema import DocsView
from .signin import signin_throttled

# Agent names are validated by the views (a bad name on PUT is a 400 with a
# reason, not a bare 404), so the routes take any single path segment.
AGENT = r"^api/v1/agents/(?P<name>[^/]+)"
TURN = AGENT + r"/turns/(?P<turn_id>[^/]+)"

urlpatterns = [
    path("", views.home),
    # Operations: outside /api/v1 and its keys, for probes and scrapers.
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    path("metrics", views.metrics_view),
    path("studio/", pages.home, name="studio-home"),
    path("studio/login/", signin_throttled(auth_views.LoginView.as_view()), name="login"),
    path("studio/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("studio/<slug:game>/", pages.game_home, name="game-home"),
    # Memories first: its path is longer than the agent page's.
    path("studio/<slug:game>/", include("memories.pages")),
    # Before the agent page: the agents list's import route.
    path("studio/<slug:game>/", include("agents.time_pages")),
    path("studio/<slug:game>/", include("agents.pages")),
    path("studio/<slug:game>/", include("billing.pages")),
    # Ahead of the admin's own route to the same view, to throttle it.
    path("admin/login/", signin_throttled(admin.site.login)),
    path("admin/", admin.site.urls),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/docs/", DocsView.as_view(url_name="schema"), name="docs"),
    path("api/v1/game", api.GameView.as_view()),
    path("api/v1/agents", agents_api.AgentListView.as_view()),
    # Before the agent route: "import" is not an agent name.
    path("api/v1/agents/import", api_time.ImportView.as_view()),
    re_path(AGENT + r"$", agents_api.AgentView.as_view()),
    re_path(AGENT + r"/messages$", agents_api.MessagesView.as_view()),
    re_path(AGENT + r"/turns$", agents_api.TurnListView.as_view()),
    re_path(TURN + r"$", agents_api.TurnView.as_view()),
    re_path(TURN + r"/events$", agents_api.TurnEventsView.as_view()),
    re_path(TURN + r"/cancel$", agents_api.TurnCancelView.as_view()),
    re_path(AGENT + r"/history$", agents_api.HistoryView.as_view()),
    re_path(AGENT + r"/context$", api_time.ContextView.as_view()),
    re_path(AGENT + r"/checkpoint$", agents_api.CheckpointView.as_view()),
    re_path(AGENT + r"/checkpoints$", api_time.CheckpointListView.as_view()),
    re_path(AGENT + r"/checkpoints/(?P<checkpoint>[^/]+)$", api_time.CheckpointDetailView.as_view()),
    re_path(AGENT + r"/memories$", memories_api.MemoriesView.as_view()),
    # Greedy: a memory name may hold a '/'.
    re_path(AGENT + r"/memories/(?P<memory>.+)/history$", api_time.MemoryHistoryView.as_view()),
    re_path(AGENT + r"/fork$", api_time.ForkView.as_view()),
    re_path(AGENT + r"/export$", api_time.ExportView.as_view()),
    re_path(AGENT + r"/compact$", agents_api.CompactView.as_view()),
    re_path(AGENT + r"/compactions$", agents_api.CompactionListView.as_view()),
    path("api/v1/billing", billing_api.BillingView.as_view()),
    path("api/v1/billing/lines", billing_api.LinesView.as_view()),
    path("api/v1/billing/adjustments", billing_api.AdjustmentsView.as_view()),
    path("api/v1/billing/limits", billing_api.LimitsView.as_view()),
    re_path(r"^api/", json_error_view(404, "not_found", "There is no such API endpoint.")),
]

handler400 = "studio.views.bad_request"
handler500 = "studio.views.server_error"
