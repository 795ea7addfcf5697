from django.db import models
from django.utils import timezone


class Writer(models.TextChoices):
    AGENT = "agent", "Agent"
    COMPACTOR = "compactor", "Compactor"
    # An import installed the memory as an agent file held it: nobody this
    # studio saw wrote it (game code may have edited the file).
    IMPORT = "import", "Import"
    # A change an imported agent file tells of, made before the import:
    # credited to the file, never to the agent or the compactor (who the
    # file says made it is `MemoryEvent.file_by`).
    FILE = "file", "File"


# Who an agent file may say made a change: the writers but the file itself.
FILE_WRITERS = [(value, label) for value, label in Writer.choices if value != Writer.FILE]


class Change(models.TextChoices):
    CREATED = "created", "Created"
    UPDATED = "updated", "Updated"
    OPENED = "opened", "Opened"
    CLOSED = "closed", "Closed"
    DELETED = "deleted", "Deleted"
    # A compactor rewrite that was not applied (the memory changed since the
    # compactor read it, or the rewrite would break a hard limit).
    DROPPED = "dropped", "Rewrite dropped"
    # An import installed it (who imported it, from which file: its note).
    IMPORTED = "imported", "Imported"


class Memory(models.Model):
    """A named note an agent keeps across compactions.

    `tokens` counts the content (what `maxOpenTokens` budgets) and `bytes`
    the UTF-8 of name + description + content (what the store cap limits);
    both are set on every write so budgets are sums, never re-counts.
    `version` goes up on every write, so the compactor can tell whether a
    memory changed since it read it.
    """

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="memories")
    name = models.CharField(max_length=64)
    description = models.CharField(max_length=300)
    content = models.TextField()
    is_open = models.BooleanField(default=False)
    tokens = models.PositiveIntegerField(default=0)
    bytes = models.PositiveIntegerField(default=0)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=16, choices=Writer.choices, default=Writer.AGENT)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "memories"
        constraints = [models.UniqueConstraint(fields=["agent", "name"], name="memory_name_unique_per_agent")]
        # The most recently written first, read a page at a time: what a
        # refused open names and what a checkpoint lists, however many
        # memories an agent is steered into keeping.
        indexes = [models.Index(fields=["agent", "-updated_at", "-id"], name="memory_recent_first")]

    def __str__(self) -> str:
        return self.name


class MemoryEvent(models.Model):
    """One change to one memory, kept for its history and to show the store
    as of any block.

    Stands on its own (name, not a foreign key to the memory) so a deleted
    memory's history outlives it.
    """

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="memory_events")
    name = models.CharField(max_length=64)
    change = models.CharField(max_length=16, choices=Change.choices)
    by = models.CharField(max_length=16, choices=Writer.choices)
    turn_id = models.UUIDField(null=True, blank=True)
    # The first block whose end shows the change (`Agent.change_block`): an
    # agent's change, its turn's block; null for a compactor's change made
    # before the studio recorded it.
    block = models.PositiveIntegerField(null=True, blank=True)
    # A compactor's change: the checkpoint it was made for.
    checkpoint = models.ForeignKey(
        "agents.Checkpoint", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    # A change as an imported agent file tells it (`by` is `file`): who the
    # file says made it; blank otherwise, or when the file names no one.
    file_by = models.CharField(max_length=16, choices=FILE_WRITERS, blank=True, default="")
    # A write's is the memory's `updated_at`, so the store as of a block
    # shows the times the store showed.
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["agent", "name", "id"])]

    def __str__(self) -> str:
        return f"{self.name} {self.change} by {self.by}"


class StoreBaseline(models.Model):
    """The store as block `through_block` left it, kept in place of the
    memory changes up to that block once retention pruned them
    (STUDIO_RETAIN_MEMORY_CHANGES_DAYS): the store as of a later block is
    this, with the changes after it replayed.

    `memories` holds each memory as the replay makes it: `id` (the change
    that made it, which orders the store), name, description, content,
    open, version, updatedAt and updatedBy.
    """

    agent = models.OneToOneField("agents.Agent", on_delete=models.CASCADE, related_name="store_baseline")
    through_block = models.PositiveIntegerField()
    memories = models.JSONField(default=list)
    # When it last moved: since then the changes up to `through_block` are gone.
    pruned_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.agent} store as of block {self.through_block}"
