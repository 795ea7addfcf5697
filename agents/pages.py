"""The Agents surface (placeholder until the pages land)."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import path

from studio.pages import member_access


@login_required
def agents_list(request, game):
    access = member_access(request, game)
    return render(request, "base.html", {"game": access.game, "section": "agents"})


@login_required
def agent_page(request, game, name):
    access = member_access(request, game)
    return render(request, "base.html", {"game": access.game, "section": "agents"})


urlpatterns = [
    path("agents/", agents_list, name="agents-list"),
    path("agents/<str:name>/", agent_page, name="agent-page"),
]
