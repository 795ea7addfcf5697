"""Every route of the studio: each app's API routes under /api/v1/ and its
pages under /studio/<game>/ (`<app>/urls.py`), and the studio's own —
operations, sign-in, the admin, the schema, the game."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from agents import urls as agents_urls
from billing import urls as billing_urls
from memories import urls as memories_urls

from . import api, views
from .auth.signin import signin_throttled
from .errors import json_error_view
from .http.schema import DocsView
from .pages import shell

urlpatterns = [
    path("", views.home),
    path("favicon.ico", views.favicon),
    # Operations: outside /api/v1 and its keys, for probes and scrapers.
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    path("metrics", views.metrics_view),
    path("studio/", shell.home, name="studio-home"),
    path("studio/login/", signin_throttled(auth_views.LoginView.as_view()), name="login"),
    path("studio/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("studio/<slug:game>/", shell.game_home, name="game-home"),
    path("studio/<slug:game>/", include(memories_urls.pages)),
    path("studio/<slug:game>/", include(agents_urls.pages)),
    path("studio/<slug:game>/", include(billing_urls.pages)),
    # Ahead of the admin's own route to the same view, to throttle it.
    path("admin/login/", signin_throttled(admin.site.login)),
    path("admin/", admin.site.urls),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/docs/", DocsView.as_view(url_name="schema"), name="docs"),
    path("api/v1/game", api.GameView.as_view()),
    path("api/v1/", include(agents_urls.api)),
    path("api/v1/", include(memories_urls.api)),
    path("api/v1/", include(billing_urls.api)),
    re_path(r"^api/", json_error_view(404, "not_found", "There is no such API endpoint.")),
]

handler400 = "studio.views.bad_request"
handler500 = "studio.views.server_error"
