"""The memories app's routes: the store over the API (under /api/v1/) and
its page (under /studio/<game>/). A memory's history is the agents app's
(`agents.urls`)."""

from django.urls import path, re_path

from memories import api as views
from memories import pages as memory_pages

api = [
    re_path(r"^agents/(?P<name>[^/]+)/memories$", views.MemoriesView.as_view()),
]

pages = [
    path("agents/<str:name>/memories/", memory_pages.memories_page, name="memories-page"),
]
