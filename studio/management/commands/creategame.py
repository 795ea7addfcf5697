from decimal import Decimal, InvalidOperation

from django.core.management.base import BaseCommand, CommandError

from studio.models import Game
from studio.services import game_create


class Command(BaseCommand):
    help = "Create a game and print an admin API key for it (the last line of output)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--credits", default="0", help="opening credits (default 0)")

    def handle(self, *args, slug, name, credits, **options):
        try:
            amount = Decimal(credits)
        except InvalidOperation:
            raise CommandError(f"--credits must be a number, not {credits!r}") from None
        if Game.objects.filter(slug=slug).exists():
            raise CommandError(f"A game '{slug}' already exists.")
        game, key = game_create(slug=slug, name=name, credits=amount)
        self.stderr.write(f"Created game '{game.slug}' with {amount} credits. Its admin key:")
        self.stdout.write(key)
