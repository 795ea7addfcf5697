"""The revisions of an agent's config: who defined each, from where and
when, two of them compared, and restoring one — a definition like any
other (`services.revision_restore`), recorded as made in the pages.

Thin: parse, call the domain, render (`view_models.RevisionsPage`)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agents import services
from agents.models import DefinedVia
from agents.pages.view_models import RevisionsPage
from agents.pages.views import agent_of
from agents.provenance import is_game_code
from agents.selectors import revision_latest
from studio.errors import DomainError
from studio.http.params import whole_number
from studio.pages.shell import member_access


def _number(text: str | None) -> int | None:
    return whole_number(text or "", max_digits=10)


@require_GET
@login_required
def agent_revisions(request, game, name):
    access = member_access(request, game)
    agent = agent_of(access, name)
    page = RevisionsPage(agent, older=_number(request.GET.get("from")), newer=_number(request.GET.get("to")))
    context = {"game": access.game, "section": "agents", "agent": agent, "page": page}
    return render(request, "agents/revisions.html", context)


@require_POST
@login_required
def revision_restore(request, game, name, number):
    """Define the agent with revision `number`'s config — refused, and
    nothing changed, if it was defined since the page was read (`current`)."""
    access = member_access(request, game)
    agent = agent_of(access, name)
    back = reverse("agent-revisions", args=[access.game.slug, agent.name])
    current = _number(request.POST.get("current"))
    was = revision_latest(agent)
    try:
        defined = services.revision_restore(
            agent=agent,
            number=number,
            by=request.user,
            via=DefinedVia.PAGE,
            current=agent.revision if current is None else current,
        )
    except DomainError as refused:
        messages.error(request, _refusal(agent, refused))
        return redirect(f"{back}?from={number}&to={agent.revision}")
    if defined.is_unchanged:
        messages.info(request, f"{agent.name} already has revision {number}’s config: nothing changed.")
    else:
        messages.success(
            request, _restored(agent.name, number, defined.agent.revision, game_code=is_game_code(was))
        )
    return redirect(back)


def _refusal(agent, refused: DomainError) -> str:
    if refused.code != "definition_changed":
        return f"Not restored: {refused.message}"
    agent.refresh_from_db(fields=["revision"])
    return (
        f"Not restored: {agent.name} was defined again since this page was read — "
        f"{services.revision_now(agent)}. Look at what it changed, then restore again if you still want to."
    )


def _restored(name: str, number: int, now: int, *, game_code: bool) -> str:
    said = (
        f"Restored revision {number} as revision {now}: it applies from {name}’s next send; history, "
        "checkpoint and memories are untouched."
    )
    if game_code:
        said += f" Game code defined {name} before: the game’s next construct of it replaces this."
    return said
