from django.core.management.base import BaseCommand, CommandError

from studio.auth.keys import LAST_USE_STEP
from studio.models import ApiKey, Game

COLUMNS = "{:<14}{:<10}{:<18}{:<18}{:<26}{}"
MINUTE = "%Y-%m-%d %H:%M"


def key_line(key: ApiKey) -> str:
    revoked = f"revoked {key.revoked_at:{MINUTE}}" if key.revoked_at else "live"
    last_used = f"{key.last_used_at:{MINUTE}}" if key.last_used_at else "never"
    return COLUMNS.format(
        key.prefix, key.role, f"{key.created_at:{MINUTE}}", last_used, revoked, key.label
    ).rstrip()


class Command(BaseCommand):
    help = (
        "List a game's API keys: prefix, role, when each was made and last used (UTC, to within "
        f"{LAST_USE_STEP.seconds // 60} minutes), whether it is revoked, and its label."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")

    def handle(self, *args, slug, **options):
        game = Game.objects.filter(slug=slug).first()
        if game is None:
            raise CommandError(f"There is no game '{slug}'.")
        self.stdout.write(COLUMNS.format("PREFIX", "ROLE", "CREATED", "LAST USED", "STATE", "LABEL"))
        for key in ApiKey.objects.filter(game=game).order_by("created_at", "pk"):
            self.stdout.write(key_line(key))
