"""Replays on the pages: "Replay from here…" (posted from the agent as of a
block), a replay side by side as it plays, the agent's replays, cancelling
one, and "Use this definition" — the replay's definition applied to the
agent, once the designer has seen what it changes and confirmed.

Thin: parse, call `agents.replays`, render. What the pages show is
gathered in `view_models`, the form in `forms`.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from agents import replays, selectors
from agents.models import NUMBER_MAX
from agents.pages.forms import ReplayForm
from agents.pages.history import as_of_page, paced
from agents.pages.view_models import ReplayPage, config_changes
from agents.pages.views import agent_of
from agents.wire import config_wire
from studio.errors import DomainError, NotFound
from studio.pages.shell import member_access, render_page

REPLAYS_SHOWN = 50


def _replay_of(agent, replay_id):
    try:
        return selectors.replay_get(agent=agent, replay_id=replay_id)
    except NotFound:
        raise Http404("No such replay.") from None


@require_POST
@login_required
def replay_start(request, game, name, number):
    access = member_access(request, game)
    agent = agent_of(access, name)
    if number > NUMBER_MAX:
        raise Http404("No such block.")
    form = ReplayForm(request.POST, game=access.game)
    if form.is_valid():
        try:
            paced(request)
            replay = replays.replay_start(
                agent=agent,
                from_block=number,
                through=form.cleaned_data["through"],
                changes=form.changes(agent),
            )
        except DomainError as error:
            form.add_domain_error(error)
        else:
            # What it is doing is said on its page while it plays (`_replay.html`), not
            # in a flash message, which would stay on the page after the replay ended.
            return redirect("agent-replay", access.game.slug, agent.name, replay.uuid)
    return as_of_page(request, access, agent, number, replay_form=form)


@require_safe
@login_required
def replay_page(request, game, name, replay_id):
    access = member_access(request, game)
    agent = agent_of(access, name)
    context = {
        "game": access.game,
        "section": "agents",
        "agent": agent,
        "page": ReplayPage(_replay_of(agent, replay_id)),
    }
    return render_page(request, "agents/replay.html", context, {"replay": "agents/_replay.html"})


@require_safe
@login_required
def replay_list(request, game, name):
    access = member_access(request, game)
    agent = agent_of(access, name)
    page = selectors.replays_page(agent=agent, after=None, limit=REPLAYS_SHOWN)
    context = {"game": access.game, "section": "agents", "agent": agent, "replays": page.items}
    return render(request, "agents/replays.html", context)


@require_POST
@login_required
def replay_cancel(request, game, name, replay_id):
    access = member_access(request, game)
    replay = _replay_of(agent_of(access, name), replay_id)
    try:
        replays.replay_cancel(replay)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, "Cancelled: the blocks it played stay, to be compared.")
    return redirect("agent-replay", access.game.slug, name, replay.uuid)


@require_http_methods(["GET", "POST"])
@login_required
def replay_use(request, game, name, replay_id):
    """GET: what the replay's definition would change of the agent, and a
    button to confirm; POST: apply it."""
    access = member_access(request, game)
    agent = agent_of(access, name)
    replay = _replay_of(agent, replay_id)
    refusal = None
    if request.method == "POST":
        try:
            replays.replay_definition_use(replay, by=request.user)
        except DomainError as error:
            refusal = error.message
        else:
            messages.success(request, f"{agent.name} now has the replay’s definition, from its next send on.")
            return redirect("agent-page", access.game.slug, agent.name)
    context = {
        "game": access.game,
        "section": "agents",
        "agent": agent,
        "replay": replay,
        "changes": config_changes(config_wire(agent), replay.config),
        "refusal": refusal,
    }
    return render(request, "agents/replay_use.html", context, status=400 if refusal else 200)
