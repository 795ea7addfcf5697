"""Seed a demo game for `make run`: a user, a key, and a character with
memories and a history of tool calls. Safe to run again: it builds the
story once, and prints the same key each time — the key is kept, as text,
in a file beside the project that git ignores (`.demo-key`, readable by its
owner only), since the database keeps only its digest. When that key no
longer works (the file is gone, the database is new, the key was revoked)
it makes a new one, revokes the demo keys before it, and says so. DEBUG
only (which also offers the `scripted` model its story plays on)."""

import json
import os
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from agents.compaction import compaction_request
from agents.models import CompactionReason, DefinedVia
from agents.sending.engine import send
from agents.services import AgentDefinition, agent_define
from billing.defaults import EXAMPLE_PRICES, price_rows_add
from studio.auth.keys import apikey_create, apikey_revoke, apikey_verify
from studio.models import ApiKey, Game, Membership, Role
from studio.services import game_create

USERNAME = "demo"
KEY_LABEL = "make run"
# The demo key's text, kept between runs (.gitignore lists it).
KEY_FILE = ".demo-key"
PASSWORD = "demo-studio"

SYSTEM_PROMPT = """You are the dungeon master of a drowned-coast adventure. Keep the story straight.

Keep a memory named `quest` open at all times: what the player is trying to do right
now and why. Update it whenever their goal changes.

Keep `npcs` (everyone they have met and how that meeting went) as a closed memory.
Open it when the scene turns to someone, write what changed, and close it again."""


def script(*steps) -> str:
    return json.dumps({"script": list(steps)})


STORY = [
    script(
        {
            "call": "close_memory",
            "args": {
                "name": "quest",
                "description": "What the player is trying to do right now, and why",
                "content": "Reach the drowned chapel. Mara wants the silver key she saw in a dream.",
            },
        },
        {"call": "open_memory", "args": {"name": "quest"}},
        {"say": "The tide is out. The chapel's spire leans over the mudflats, a mile off."},
    ),
    script(
        {
            "call": "close_memory",
            "args": {
                "name": "npcs",
                "description": "Everyone Mara has met and what they think of her",
                "content": "The ferryman: wary, took two coins, warned her about the bells.",
            },
        },
        {"say": "The ferryman pockets your coins and says nothing more until the far shore."},
    ),
    script(
        {"call": "open_memory", "args": {"name": "inventory"}},
        {"say": "You check your pack: rope, a lamp, the last of the bread."},
    ),
    "I ask the ferryman what the bells mean.",
]


AFTER_CHECKPOINT = [
    script(
        {"call": "open_memory", "args": {"name": "npcs"}},
        {
            "call": "close_memory",
            "args": {
                "name": "npcs",
                "content": "The ferryman: wary, took two coins, warned her about the bells.\n"
                "The bell-ringer's ghost: lonely; promised to ring twice if danger comes.",
            },
        },
        {"say": "A pale figure in the belfry raises a hand. 'Twice,' it whispers, 'if they come.'"},
    ),
    "@memory quest: Find the silver key in the chapel crypt before the tide turns.\nI climb down into the crypt.",
]


class Command(BaseCommand):
    help = "Create (once) the demo game and print a login and an API key."

    def add_arguments(self, parser):
        parser.add_argument(
            "--url", default="http://127.0.0.1:8000", help="Where the studio is served (what it prints)."
        )
        parser.add_argument(
            "--key-file",
            default=str(Path(settings.BASE_DIR) / KEY_FILE),
            help="Where the demo key is kept between runs (default: .demo-key at the project's root).",
        )

    def handle(self, *args, **options):
        # Checked first, so a refused run makes nothing. DEBUG, not just the
        # scripted model: the demo's superuser has a password anyone can read.
        if not settings.DEBUG:
            raise CommandError(
                f"seed_demo makes a superuser '{USERNAME}' whose password is published, so it runs "
                "only on a development studio: run it with DJANGO_DEBUG=true (as `make run` does)."
            )
        game = Game.objects.filter(slug="demo").first()
        if game is None:
            game, _ = game_create(slug="demo", name="Drowned Coast (demo)", credits=1000)
        user = get_user_model().objects.filter(username=USERNAME).first()
        if user is None:
            user = get_user_model().objects.create_user(
                USERNAME, password=PASSWORD, is_staff=True, is_superuser=True
            )
        Membership.objects.get_or_create(user=user, game=game, defaults={"role": Role.ADMIN})
        # The real models docs/models.md's examples name, priced, so those
        # examples work here as written (a model needs a price of its own).
        price_rows_add(EXAMPLE_PRICES)
        agent, created = agent_define(
            game=game,
            name="dm",
            # The story below is played as scripts: the `scripted` model,
            # whatever the studio's default model is.
            definition=AgentDefinition(
                system_prompt=SYSTEM_PROMPT,
                model="scripted",
                memory_enabled=True,
                max_open_tokens=2000,
                max_tokens=16000,
            ),
            by=None,
            via=DefinedVia.DEMO,
        )
        if agent.last_block == 0:
            self._play_story(agent)
        key_file = Path(options["key_file"])
        key = _key_kept(game, key_file)
        if key is not None:
            said = f"kept in {key_file.name}: the same key every run"
        else:
            key, revoked = _key_replaced(game, key_file)
            said = (
                f"new: the demo key an earlier run printed is revoked; this one is kept in {key_file.name}"
                if revoked
                else f"new, kept in {key_file.name} for the next runs"
            )
        self._print(key, options["url"].rstrip("/"), said)

    def _play_story(self, agent) -> None:
        """A history with tool calls, a checkpoint, and turns after it."""
        for message in STORY:
            send(agent=agent, content=message)
        # Compact here and now (not on the background runner), so the demo
        # starts with a checkpoint in force.
        with override_settings(STUDIO={**settings.STUDIO, "COMPACTION_RUNNER": "inline"}):
            compaction_request(agent=agent, reason=CompactionReason.MANUAL)
        for message in AFTER_CHECKPOINT:
            send(agent=agent, content=message)

    def _print(self, key: str, url: str, said: str) -> None:
        self.stdout.write(
            f"\nThe studio is starting on {url}\n"
            f"  sign in:  {USERNAME} / {PASSWORD}   at {url}/studio/  (and /admin/)\n"
            f"  API key:  {key}   (game 'demo', admin; {said})\n"
            f"  try:     curl -H 'Authorization: Bearer <key>' {url}/api/v1/agents/dm/history\n"
        )


def _key_kept(game: Game, key_file: Path) -> str | None:
    """The demo key the file keeps, while it still works for the demo game."""
    try:
        text = key_file.read_text().strip()
    except OSError:  # not there yet (or unreadable): a new key
        return None
    key = apikey_verify(text)
    if key is None or key.game_id != game.pk or key.label != KEY_LABEL:
        return None
    return text


def _key_replaced(game: Game, key_file: Path) -> tuple[str, bool]:
    """A new demo key, written to the file (its owner alone may read it),
    and whether older demo keys were revoked: one demo key at a time."""
    revoked = False
    for prefix in ApiKey.objects.filter(game=game, label=KEY_LABEL, revoked_at__isnull=True).values_list(
        "prefix", flat=True
    ):
        revoked = apikey_revoke(prefix=prefix)[1] or revoked
    _, key = apikey_create(game=game, role=Role.ADMIN, label=KEY_LABEL)
    written = key_file.with_name(key_file.name + ".new")
    written.unlink(missing_ok=True)
    descriptor = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(key + "\n")
    os.replace(written, key_file)  # whole or not at all
    return key, revoked
