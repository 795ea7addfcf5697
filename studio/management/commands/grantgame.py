from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from studio.models import Game, Membership, Role


class Command(BaseCommand):
    help = "Let a studio user see a game, with a role."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("username")
        parser.add_argument("--role", choices=Role.values, default=Role.DESIGNER)

    def handle(self, *args, slug, username, role, **options):
        game = Game.objects.filter(slug=slug).first()
        if game is None:
            raise CommandError(f"There is no game '{slug}'.")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"There is no user '{username}'.")
        Membership.objects.update_or_create(user=user, game=game, defaults={"role": role})
        self.stdout.write(f"{username} is now {role} of '{slug}'.")
