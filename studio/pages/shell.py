"""The studio's page shell: sign-in, the games a user may see, and the one
rule every page follows — a game's pages are for its members only (anyone
else gets a 404, as if the game did not exist)."""

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import Http404, JsonResponse
from django.shortcuts import render

from billing.budgets import game_budgets
from studio.errors import error_body
from studio.models import Game, Membership, Role
from studio.pages.overview import GameOverview


@dataclass(frozen=True)
class Access:
    game: Game
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN


def member_access(request, slug: str) -> Access:
    """The signed-in user's access to game `slug`, or a 404."""
    membership = (
        Membership.objects.select_related("game").filter(user=request.user, game__slug=slug).first()
        if request.user.is_authenticated
        else None
    )
    if membership is None:
        raise Http404("No such game.")
    return Access(game=membership.game, role=membership.role)


def render_page(request, template: str, context: dict, fragments: dict[str, str] | None = None):
    """Render the page, or only one of its live fragments when asked with
    `?fragment=<name>` (the live script refetches those)."""
    name = request.GET.get("fragment")
    if name:
        if not fragments or name not in fragments:
            raise Http404("No such fragment.")
        return render(request, fragments[name], context)
    return render(request, template, context)


def wants_json(request) -> bool:
    """Whether a page's form was posted by studio.js, which reads JSON."""
    return request.headers.get("X-Requested-With") == "fetch" or "application/json" in request.headers.get(
        "Accept", ""
    )


def form_errors_json(form, code: str = "invalid_request", status: int = 400) -> JsonResponse:
    """A form's errors for studio.js: each with the field it is about (None:
    the form's own), for the page to show beside it; all of them in the
    message."""
    details = [
        {"field": None if name == NON_FIELD_ERRORS else name, "message": error}
        for name, errors in form.errors.items()
        for error in errors
    ]
    message = " ".join(detail["message"] for detail in details)
    return JsonResponse(error_body(code, message, details), status=status)


@login_required
def home(request):
    memberships = (
        Membership.objects.filter(user=request.user)
        .select_related("game", "game__account")
        .order_by("game__slug")
    )
    by_game = {membership.game_id: membership for membership in memberships}
    budgets = game_budgets([m.game for m in by_game.values()], is_operator=request.user.is_staff)
    # The most urgent first: refused, then low, then the shortest runway.
    games = [{"membership": by_game[budget.game.pk], "budget": budget} for budget in budgets]
    return render(request, "studio/home.html", {"games": games})


@login_required
def game_home(request, game):
    """The game's overview: the page a designer opens first."""
    access = member_access(request, game)
    context = {
        "game": access.game,
        "section": "overview",
        "view": GameOverview(access.game, is_operator=request.user.is_staff),
    }
    return render(request, "studio/overview.html", context)
