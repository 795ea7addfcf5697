from django.core.management.base import BaseCommand, CommandError

from studio.auth.keys import apikey_prefix_of, apikey_revoke

from .listkeys import key_line


class Command(BaseCommand):
    help = (
        "Revoke an API key: requests carrying it are refused from now on, and streams opened with it "
        "end within STUDIO_WS_REJOIN_SECONDS. Prints the key's row."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "prefix", help="the key's prefix (as listkeys shows it), with sk_ or without, or the key"
        )

    def handle(self, *args, prefix, **options):
        prefix = apikey_prefix_of(prefix)
        key, revoked = apikey_revoke(prefix=prefix)
        if key is None:
            raise CommandError(
                f"No API key has the prefix '{prefix}' (manage.py listkeys SLUG lists a game's)."
            )
        if not revoked:
            self.stderr.write(f"That key was already revoked, at {key.revoked_at:%Y-%m-%d %H:%M:%S} UTC.")
        self.stdout.write(f"{key_line(key)}  game {key.game.slug}")
