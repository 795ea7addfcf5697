"""The Memories surface (placeholder until the pages land)."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import path

from studio.pages import member_access


@login_required
def memories_page(request, game, name):
    access = member_access(request, game)
    return render(request, "base.html", {"game": access.game, "section": "agents"})


urlpatterns = [
    path("agents/<str:name>/memories/", memories_page, name="memories-page"),
]
