from django.core.management.base import BaseCommand, CommandError

from studio.auth.keys import apikey_create
from studio.models import Game, Role


class Command(BaseCommand):
    help = "Create an API key for a game and print it (the last line of output)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--role", choices=Role.values, default=Role.DESIGNER)
        parser.add_argument("--label", default="")

    def handle(self, *args, slug, role, label, **options):
        game = Game.objects.filter(slug=slug).first()
        if game is None:
            raise CommandError(f"There is no game '{slug}'.")
        _, key = apikey_create(game=game, role=role, label=label)
        self.stderr.write(f"A {role} key for '{slug}' (shown once, keep it safe):")
        self.stdout.write(key)
