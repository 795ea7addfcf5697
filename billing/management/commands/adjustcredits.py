import getpass

from django.core.management.base import BaseCommand, CommandError

from billing import ledger
from billing.forms import AdjustmentForm
from studio.models import Game

FIELDS = {"amount": "AMOUNT", "reason": "--reason"}


class Command(BaseCommand):
    help = (
        "Add credits to a game (a negative AMOUNT takes them away), with a reason kept beside it; "
        "prints the new balance as the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("amount", help="credits, up to six decimal places: 250 adds, -10.5 takes away")
        parser.add_argument("--reason", default="", help="why: kept with the adjustment")

    def handle(self, *args, slug, amount, reason, **options):
        game = Game.objects.filter(slug=slug).first()
        if game is None:
            raise CommandError(f"There is no game '{slug}'.")
        form = AdjustmentForm({"amount": amount, "reason": reason})
        if not form.is_valid():
            problems = [f"{FIELDS[name]}: {' '.join(errors)}" for name, errors in form.errors.items()]
            raise CommandError(" ".join(problems))
        ledger.adjustment_post(
            game=game,
            amount=form.cleaned_data["amount"],
            reason=form.cleaned_data["reason"],
            made_by=_made_by(),
        )
        self.stderr.write(
            f"Adjusted '{slug}' by {ledger.credits_text(form.cleaned_data['amount'])}. Its balance:"
        )
        self.stdout.write(ledger.credits_text(ledger.balance(game)))


def _made_by() -> str:
    """The command, and the system user who ran it when there is one."""
    try:
        return f"manage.py adjustcredits (by {getpass.getuser()})"
    except (KeyError, OSError):  # no login name in this environment
        return "manage.py adjustcredits"
