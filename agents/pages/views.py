"""The Agents surface: the game's agents, and one agent's page — its config,
its context window, checkpoint, compactions and history, live — with the
actions a designer takes there (define, send as the player, cancel a turn,
compact now).

Thin: parse, call the domain (`services`, `engine`, `compaction`), render.
What the pages show is gathered in `view_models`, their forms in `forms`. The actions a page takes
without a reload answer JSON: `{"message": …}` or `{"error": {"code", "message"}}`.
"""

import math
from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from agents import compaction, services
from agents.models import CompactionReason, CompactionStatus, DefinedVia, Turn, TurnStatus
from agents.pages.forms import (
    AgentConfigForm,
    DefaultModelForm,
    ImportForm,
    NewAgentForm,
    config_initial,
    memory_words,
)
from agents.pages.view_models import AgentPage, agent_rows, deletion_view
from agents.providers import default_model
from agents.selectors import agent_get, turn_get
from agents.sending import engine, turn_slot
from agents.wire import compaction_wire, game_wire, turn_wire
from billing import ledger
from billing.funding import REFUSAL_SHORT_OF, fix_link, game_funding
from studio.auth.throttles import send_wait
from studio.errors import DomainError, NotFound, error_body
from studio.http.params import whole_number
from studio.pages.shell import member_access, render_page

AGENT_FRAGMENTS = {
    name: f"agents/_{name}.html"
    for name in ("stats", "context", "checkpoint", "compactions", "history", "timeline")
}
DEFINED = "Agent '{name}' is defined. Send it something as the player."
SAVED = "Saved. The new config applies from the next send; history, checkpoint and memories are untouched."


def agent_of(access, name: str):
    try:
        return agent_get(game=access.game, name=name)
    except NotFound:
        raise Http404("No such agent.") from None


def _before(request) -> int | None:
    number = whole_number(request.GET.get("before", ""), max_digits=18)
    return None if number is None else max(number, 1)


# --- pages -------------------------------------------------------------------------------


def _define(request, access, form, *, saved: str, name: str | None = None):
    """Define the agent from a posted config form (the form's own name for a
    new one) and go to its page saying `saved`; None when the form or
    `agent_define` refused it, and the form then says why."""
    if not form.is_valid():
        return None
    try:
        agent, _ = services.agent_define(
            game=access.game,
            name=name or form.cleaned_data["name"],
            definition=form.definition(),
            by=request.user,
            via=DefinedVia.PAGE,
            if_match=form.if_match() if name else None,
        )
    except DomainError as error:
        if error.code == "definition_changed":  # since the page was read (a deleted agent: 404)
            form.defined_since(agent_get(game=access.game, name=name))
        else:
            form.add_domain_error(error)
        return None
    messages.success(request, saved.format(name=agent.name))
    return redirect("agent-page", access.game.slug, agent.name)


def _form_context(access, form, agent) -> dict:
    """What both pages with a config form show around it."""
    words = memory_words(agent)
    return {
        "game": access.game,
        "section": "agents",
        "form": form,
        "memory_words": words,
        "misses_memory": form.misses_memory(words),
    }


@require_http_methods(["GET", "POST"])
@login_required
def agents_list(request, game):
    access = member_access(request, game)
    form = NewAgentForm(game=access.game)
    if request.method == "POST":
        form = NewAgentForm(request.POST, game=access.game)
        if response := _define(request, access, form, saved=DEFINED):
            return response
    return list_page(request, access, form=form, status=400 if form.is_bound else 200)


def list_page(request, access, *, form=None, import_form=None, default_model_form=None, status: int = 200):
    """The agents list, with the game's default model, the new-agent form
    and, for admins, the import form."""
    if import_form is None and access.is_admin:
        import_form = ImportForm()
    game = access.game
    funding = game_funding(game, is_operator=request.user.is_staff)
    rows = agent_rows(game)
    for row in rows:
        row["send"] = funding.for_agent(row["agent"].name)
    context = {
        **_form_context(access, form or NewAgentForm(game=game), None),
        "rows": rows,
        "funding": funding,
        "import_form": import_form,
        "game_models": game_wire(game),
        "may_set_default_model": may_set_default_model(request, access),
        "default_model_form": default_model_form
        or DefaultModelForm(initial={"default_model": game.default_model}),
    }
    return render(request, "agents/list.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def agent_page(request, game, name):
    access = member_access(request, game)
    agent = agent_of(access, name)
    form = AgentConfigForm(initial=config_initial(agent), game=access.game)
    if request.method == "POST":
        if agent.replay_of_id is not None:
            raise PermissionDenied("A replay's copy takes no edits: change the replay's definition instead.")
        form = AgentConfigForm(request.POST, game=access.game)
        if response := _define(request, access, form, saved=SAVED, name=agent.name):
            return response
    context = {
        **_form_context(access, form, agent),
        "agent": agent,
        "page": AgentPage(agent, before=_before(request), is_operator=request.user.is_staff),
        "may_delete": may_delete(access, agent),
    }
    response = render_page(request, "agents/agent.html", context, AGENT_FRAGMENTS)
    response.status_code = 400 if form.is_bound else 200
    return response


def may_delete(access, agent) -> bool:
    """The game's admins delete its agents (as only admin keys may through
    the API); a replay's copy goes with its replay, never on its own."""
    return access.is_admin and agent.replay_of_id is None


DELETED = (
    "Deleted {name}, with its history, memories, checkpoints and replays. Its cost lines stay on Billing."
)


@require_http_methods(["GET", "POST"])
@login_required
def agent_delete(request, game, name):
    """GET: what deleting the agent removes and what stays, and a button to
    confirm; POST: delete it (refused while a turn or replay of it runs)."""
    access = member_access(request, game)
    agent = agent_of(access, name)
    if not may_delete(access, agent):
        raise PermissionDenied(
            "Only the game's admins delete its agents; a replay's copy goes with its replay."
        )
    refusal = None
    if request.method == "POST":
        try:
            services.agent_delete(agent=agent)
        except DomainError as error:
            refusal = error
        else:
            messages.success(request, DELETED.format(name=agent.name))
            return redirect("agents-list", access.game.slug)
    context = {
        "game": access.game,
        "section": "agents",
        "agent": agent,
        "removes": deletion_view(agent),
        "refusal": refusal,
    }
    return render(request, "agents/delete.html", context, status=refusal.status if refusal else 200)


def may_set_default_model(request, access) -> bool:
    """The game's admins and the studio's staff set its default model."""
    return access.is_admin or request.user.is_staff


@require_http_methods(["POST"])
@login_required
def default_model_set(request, game):
    access = member_access(request, game)
    if not may_set_default_model(request, access):
        raise PermissionDenied("Only the game's admins and the studio's staff change its default model.")
    form = DefaultModelForm(request.POST)
    if form.is_valid():
        try:
            services.game_default_model_set(game=access.game, model=form.cleaned_data["default_model"])
        except DomainError as error:
            form.add_error("default_model", error.message)
        else:
            messages.success(request, _default_model_news(default_model(access.game)))
            return redirect("agents-list", access.game.slug)
    return list_page(request, access, default_model_form=form, status=400)


def _default_model_news(model: str | None) -> str:
    kept = " Agents defined already keep theirs until they are defined again."
    if model is None:
        return "New agents must name their model: neither the game nor the studio has a default." + kept
    return f"New agents that name no model now run on {model}." + kept


# --- actions that answer JSON ----------------------------------------------------------------


def json_action(view):
    """A page action posted by studio.js: members only, POST only, and
    every refusal in the studio's one error shape."""

    @wraps(view)
    def wrapper(request, game, name, **kwargs):
        if request.method != "POST":
            return JsonResponse(error_body("method_not_allowed", "Use POST."), status=405)
        if not request.user.is_authenticated:
            return JsonResponse(error_body("unauthenticated", "Sign in again, then retry."), status=401)
        try:
            agent = agent_of(member_access(request, game), name)
            return view(request, agent, **kwargs)
        except Http404:
            return JsonResponse(error_body("not_found", "There is no such agent in your games."), status=404)
        except DomainError as error:
            body = error_body(error.code, _said_to(request, error))
            if error.code in REFUSAL_SHORT_OF:
                body["error"]["link"] = refusal_link(request, agent.game, error.code)
            return JsonResponse(body, status=error.status, headers=error.headers())

    return wrapper


def _said_to(request, error: DomainError) -> str:
    """The error's message, its advice fitting the reader: a refusal for
    money tells an operator where to lift it, anyone else whom to ask."""
    if isinstance(error, ledger.MoneyRefused):
        return error.message_for(is_operator=request.user.is_staff)
    return error.message


def refusal_link(request, game, code: str) -> dict:
    """For a refusal for want of credits or cap room: a link to Billing,
    where an operator lifts it (the refusal says whom to ask)."""
    fix = fix_link(game, REFUSAL_SHORT_OF[code], is_operator=request.user.is_staff)
    return {"href": fix["href"], "text": fix["text"]}


@json_action
def agent_send(request, agent):
    wait = send_wait(f"user:{request.user.pk}")
    if wait is not None:
        seconds = math.ceil(wait)
        response = JsonResponse(
            error_body(
                "rate_limited", f"You are sending faster than the studio allows; try again in {seconds} s."
            ),
            status=429,
        )
        response["Retry-After"] = str(seconds)
        return response
    transient = request.POST.get("transient") in ("on", "true", "1")
    sent = engine.send(agent=agent, content=request.POST.get("content", ""), transient=transient)
    turn = sent.turn
    shown = turn_wire(turn, cost=sent.cost, entries=sent.entries)
    answer = {
        "message": _send_message(turn, shown.get("pendingToolCalls", [])),
        "tone": _send_tone(turn),
        "turn": shown,
    }
    if turn.error_code in REFUSAL_SHORT_OF:  # it stopped for want of credits or cap room
        answer["link"] = refusal_link(request, agent.game, turn.error_code)
    return JsonResponse(answer)


def _send_message(turn: Turn, pending: list[dict]) -> str:
    if turn.status == TurnStatus.WAITING:
        names = ", ".join(dict.fromkeys(call["name"] for call in pending)) or "its tool calls"
        return (
            f"Block {turn.block_number} waits for the game to answer {names}; the reply comes once it has "
            "(the history below shows it)."
        )
    if turn.status == TurnStatus.FAILED:
        return f"The turn failed: {turn.error}"
    if turn.status == TurnStatus.CANCELLED:
        return "The turn was cancelled." + (
            "" if turn.is_transient else f" Block {turn.block_number} keeps what it did."
        )
    if turn.is_transient:
        return f"Transient reply — not kept in history:\n{turn.reply}"
    return f"Block {turn.block_number} — {turn.reply}"


def _send_tone(turn: Turn) -> str | None:
    return {TurnStatus.FAILED: "error", TurnStatus.CANCELLED: "warn"}.get(turn.status)


@json_action
def turn_cancel(request, agent, turn_id):
    turn = turn_slot.turn_cancel(turn_get(agent=agent, turn_id=turn_id))
    message = "Cancelled." if turn.has_ended else "Cancelling — the turn stops at its next check."
    return JsonResponse({"message": message, "turn": turn_wire(turn)}, status=202)


@json_action
def agent_compact(request, agent):
    services.replay_copy_check(agent, then="Its replay compacts it where the agent it replays was.")
    item = compaction.compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    item.refresh_from_db()
    return JsonResponse({"message": _compact_message(item), "compaction": compaction_wire(item)}, status=202)


def _compact_message(item) -> str:
    if item.status == CompactionStatus.DONE and item.checkpoint:
        return f"Compacted: blocks through {item.checkpoint.through_block} are folded into the checkpoint."
    if item.status == CompactionStatus.DONE:
        return "Nothing to fold: every verbatim block but the newest is already folded."
    if item.status == CompactionStatus.FAILED:
        return f"The compaction failed: {item.error}"
    if item.awaits_credits:
        return item.error
    return "Compaction queued — it folds every verbatim block but the newest."
