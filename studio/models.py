"""What is studio-wide: games, the API keys that act for them, and which
studio users may see which game."""

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    DESIGNER = "designer", "Designer"
    ADMIN = "admin", "Admin"


class Game(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    # The model of a definition that names none; blank: the studio's
    # (STUDIO_DEFAULT_MODEL). Set through agents.services.game_default_model_set,
    # which checks it as a definition's model is checked.
    default_model = models.CharField(
        max_length=200,
        blank=True,
        help_text="The model an agent gets when its definition names none: scripted, openai:<model> "
        "or anthropic:<model>. Blank: the studio's default (STUDIO_DEFAULT_MODEL).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class ApiKey(models.Model):
    """A key acts for one game with one role.

    Only a SHA-256 digest of the secret is kept: the key is shown once, when
    it is made. Keys are long random strings, so a fast digest is enough (no
    password stretching); `prefix` finds the row without a table scan and the
    digest is compared in constant time.
    """

    game = models.ForeignKey(Game, on_delete=models.CASCADE, related_name="api_keys")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.DESIGNER)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # When a request last carried the key, to within keys.LAST_USE_STEP:
    # written at most that often, never once per request.
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.game.slug}:{self.prefix}… ({self.role})"

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN


class Membership(models.Model):
    """A studio user's access to a game's pages."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    game = models.ForeignKey(Game, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.DESIGNER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "game"], name="one_membership_per_game")]

    def __str__(self) -> str:
        return f"{self.user} in {self.game} ({self.role})"


class JobRun(models.Model):
    """When each periodic job last ran (studio/ops/jobs.py): the dead man's
    switches an operator alerts on — beat sending the sweep, the sweep,
    the prune, the backups. One row a job, written over at each run."""

    job = models.CharField(max_length=32, primary_key=True)
    last_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.job} last ran {self.last_at:%Y-%m-%d %H:%M:%S}"
