"""An agent through time, on the pages: the agent as of one of its blocks
(with "Fork from here" and "Replay from here…"), its checkpoints with what
each changed, and agent files (export on the agent page, import on the
list, for admins).

Thin: parse, call `agents.history` (reads; `imports` writes), render.
What the pages show is gathered in `view_models`, their forms in `forms`.
"""

import json
import math

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from agents.api.agents import agent_file_response
from agents.history import as_of, checkpoints
from agents.history.imports import ImportedBy, agent_fork, agent_import
from agents.models import NUMBER_MAX
from agents.pages.forms import ForkForm, ImportForm, ReplayForm, fork_name, memory_words, replay_initial
from agents.pages.view_models import AsOfPage
from agents.pages.views import agent_of, list_page
from agents.replays import newest_ended_block
from studio.auth.throttles import send_wait
from studio.errors import DomainError
from studio.pages.shell import form_errors_json, member_access, wants_json

# Block numbers are stored as 32-bit integers: a larger one is no block.
FORKED = "Forked from {source} as it stood when block {number} ended: {name} plays on from there."
IMPORTED = "Imported {name} from its agent file."


def _made(request, form, make, saved: str):
    """Make an agent with `make(**form.cleaned_data)` and go to its page
    saying `saved`; None when the form or the studio refused it, and the
    form then says why."""
    if not form.is_valid():
        return None
    try:
        agent = make(**form.cleaned_data)
    except DomainError as error:
        form.add_domain_error(error)
        return None
    messages.success(request, saved.format(name=agent.name))
    return redirect("agent-page", agent.game.slug, agent.name)


def paced(request) -> None:
    """A fork or an import copies a whole history: a designer makes them no
    faster than sends (STUDIO_SEND_RATE)."""
    wait = send_wait(f"user:{request.user.pk}")
    if wait is not None:
        seconds = math.ceil(wait)
        raise DomainError(
            f"You are making agents faster than the studio allows; try again in {seconds} s.",
            status=429,
            code="rate_limited",
            retry_after=seconds,
        )


@require_http_methods(["GET", "POST"])
@login_required
def agent_at_block(request, game, name, number):
    access = member_access(request, game)
    agent = agent_of(access, name)
    if number > NUMBER_MAX:
        raise Http404("No such block.")
    form = ForkForm(initial={"name": fork_name(agent, number)})
    if request.method == "POST":
        form = ForkForm(request.POST)

        def fork(name):
            paced(request)
            return agent_fork(agent=agent, name=name, at_block=number, by=request.user)

        saved = FORKED.format(source=agent.name, number=number, name="{name}")
        if response := _made(request, form, fork, saved):
            return response
    return as_of_page(request, access, agent, number, form=form)


def as_of_page(request, access, agent, number: int, *, form=None, replay_form=None):
    """The agent as of block `number`, with its fork and replay forms (as
    posted, when one was refused: the page is then a 400)."""
    form = form or ForkForm(initial={"name": fork_name(agent, number)})
    if replay_form is None:
        newest = newest_ended_block(agent)
        replay_form = ReplayForm(initial=replay_initial(agent, number, newest), game=access.game)
    words = memory_words(agent)
    # The page's parts read at one moment: a prune meanwhile shows in all or none.
    with as_of.one_moment():
        page = AsOfPage(agent, number)
        refused = form.errors or replay_form.errors or replay_form.refusal
        status = page.refusal.status if page.refusal else 400 if refused else 200
        context = {
            "game": access.game,
            "section": "agents",
            "agent": agent,
            "page": page,
            "form": form,
            "replay_form": replay_form,
            "memory_words": words,
            "misses_memory": replay_form.misses_memory(words),
        }
        return render(request, "agents/as_of.html", context, status=status)


@require_safe
@login_required
def agent_checkpoints(request, game, name):
    access = member_access(request, game)
    agent = agent_of(access, name)
    context = {
        "game": access.game,
        "section": "agents",
        "agent": agent,
        "checkpoints": checkpoints.checkpoints_detailed(agent),
    }
    return render(request, "agents/checkpoints.html", context)


@require_safe
@login_required
def agent_export(request, game, name):
    agent = agent_of(member_access(request, game), name)
    try:
        response = agent_file_response(agent, render=_page_json, separators=(", ", ": "))
    except as_of.HistoryPruned as refused:
        return HttpResponse(refused.message, status=refused.status, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{agent.name}.studio-agent.json"'
    return response


def _page_json(value) -> bytes:
    # As JsonResponse writes a whole document.
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False).encode()


@require_POST
@login_required
def agents_import(request, game):
    access = member_access(request, game)
    if not access.is_admin:
        raise PermissionDenied("Only the game's admins import agents.")
    form = ImportForm(request.POST, request.FILES)

    def make(file, name):
        paced(request)
        by = ImportedBy.named(request.user.get_username(), request.FILES["file"].name, definer=request.user)
        return agent_import(game=access.game, document=file, name=name or None, by=by)

    response = _made(request, form, make, IMPORTED)
    if wants_json(request):
        # Posted by studio.js: the page stays, and the file chosen with it.
        if response:
            return JsonResponse({"message": "Imported.", "redirect": response.url})
        return form_errors_json(form, "invalid_agent_file")
    return response or list_page(request, access, import_form=form, status=400)
