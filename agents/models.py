import uuid

from django.db import models


class CompactionType(models.TextChoices):
    SUMMARIZE = "summarize", "Summarize"
    SLIDING_WINDOW = "sliding-window", "Sliding window"


class AgentConfig(models.Model):
    """What a definition sets: the agent's config, and each of its revisions."""

    system_prompt = models.TextField(blank=True)
    # Counted when the prompt is written, so context assembly never re-counts it.
    system_tokens = models.PositiveIntegerField(default=0)
    model = models.CharField(max_length=200, default="scripted")
    memory_enabled = models.BooleanField(default=False)
    max_open_tokens = models.PositiveIntegerField(default=4000)
    compaction_type = models.CharField(
        max_length=16, choices=CompactionType.choices, default=CompactionType.SUMMARIZE
    )
    max_tokens = models.PositiveIntegerField(default=32000)
    # The game's own tools the model may call (`agents.game_tools`): a list
    # of {"name", "description", "parameters", "timeoutSeconds"?}.
    tools = models.JSONField(default=list, blank=True)

    class Meta:
        abstract = True


class Agent(AgentConfig):
    game = models.ForeignKey("studio.Game", on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=64)
    # The number of the newest block; the next turn's block is this + 1.
    # Only moved under this row's lock, so block numbers have no gaps.
    last_block = models.PositiveIntegerField(default=0)
    # The number of its config's newest `AgentRevision`.
    revision = models.PositiveIntegerField(default=1)
    # Blocks before this one were played before the studio recorded when
    # each change happened: the store and context as of them are unknown.
    recorded_from_block = models.PositiveIntegerField(default=1)
    # Blocks through this one were pruned (STUDIO_RETAIN_HISTORY_DAYS), the
    # newest of them at `history_pruned_at`: what time travel needs of them
    # is gone, and it answers 409 `history_pruned` rather than guess.
    history_pruned_through = models.PositiveIntegerField(default=0)
    history_pruned_at = models.DateTimeField(null=True, blank=True)
    # Set on a replay's copy (`Replay.replay_agent`): the agent it replays.
    # Such a copy is no character of the game — the agents list, the
    # game's agent count and its quota leave it out — but its blocks,
    # checkpoints and context stay there to look at, by its name.
    replay_of = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    # Set on a fork: the agent it was made from, by name (that agent may be
    # deleted or its name taken again since), and the block it was forked at.
    forked_from = models.CharField(max_length=64, blank=True)
    forked_at_block = models.PositiveIntegerField(null=True, blank=True)
    # Its memories' bytes together, as the store cap measures them: moved
    # by each write of memories.store, under this row's lock, so a write's
    # cap check reads one number rather than summing the store.
    store_size = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["game", "name"], name="agent_name_unique_per_game")]

    def __str__(self) -> str:
        return self.name

    def change_block(self) -> int:
        """The first block whose end shows a change made now: the running
        block, or between blocks the next one. Call under this row's lock."""
        last = Agent.objects.values_list("last_block", flat=True).get(pk=self.pk)
        running = Block.objects.filter(agent=self, number=last, status=TurnStatus.RUNNING)
        return last if running.exists() else last + 1


class DefinedVia(models.TextChoices):
    """Where a revision of an agent's config came from (`agents.provenance`)."""

    API = "api", "the API (game code)"
    PAGE = "page", "the studio's pages"
    ADMIN = "admin", "the Django admin"
    # A replay's "Use this definition" (and the config a replay's copy plays).
    REPLAY = "replay", "a replay's definition"
    IMPORT = "import", "an agent file imported"
    FORK = "fork", "a fork"
    DEMO = "demo", "the demo's setup"
    COMMAND = "command", "a command or script on the server"
    # Written before the studio recorded where a revision came from.
    UNKNOWN = "unknown", "not recorded"


class AgentRevision(AgentConfig):
    """The agent's config as one definition set it, kept so a block can be
    shown with the system prompt and tools it was played with — and who
    set it, from where, and when (`agents.provenance`)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    via = models.CharField(max_length=16, choices=DefinedVia.choices, default=DefinedVia.UNKNOWN)
    # Who, as named when it was defined: a user's username, or an API key's
    # label (its role when it has none) with the key's prefix in `by_key` —
    # never its secret. Both blank: nobody recorded (the demo, a command, a
    # revision copied from a file or another agent, or written before).
    by_name = models.CharField(max_length=200, blank=True)
    by_key = models.CharField(max_length=16, blank=True)
    # What a person reads beside it: "Restored revision 3", "Forked from dm at block 12".
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "number"], name="revision_number_unique_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.agent} revision {self.number}"


# What marks a replay's copy's name (`replays.copy_name`): no definition's
# name may hold it, so a name with it is a copy's, even once the copy is gone.
COPY_MARK = "~"

# The largest number a PositiveIntegerField holds (a block's number, a
# revision, a count): what the API and the pages accept at most for one.
NUMBER_MAX = 2**31 - 1


class TurnStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    # The model called a game tool: the turn waits, run by no process, for
    # the game's answers (or their deadlines) before its next model step.
    WAITING = "waiting", "Waiting for the game"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


ENDED_STATUSES = (TurnStatus.COMPLETED, TurnStatus.CANCELLED, TurnStatus.FAILED)
LIVE_STATUSES = (TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.WAITING)


class Turn(models.Model):
    """One send. Its auto id orders an agent's sends by arrival; `uuid` is
    the id on the wire."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # No index of its own: the (agent, status, id) index below serves every
    # lookup by agent, and with a second one SQLite chose it and scanned all
    # of an agent's turns to find its live ones.
    # Speed: a scan of the agent's turns per send on SQLite; guarded by bench/send_overhead.py --db sqlite (10,000 ÷ 0 blocks).
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="turns", db_index=False)
    status = models.CharField(max_length=16, choices=TurnStatus.choices, default=TurnStatus.QUEUED)
    is_transient = models.BooleanField(default=False)
    block_number = models.PositiveIntegerField(null=True, blank=True)
    reply = models.TextField(blank=True)
    error = models.TextField(blank=True)
    # Why a failed turn failed, for code (`budget_exhausted`, `deadline`, …).
    error_code = models.CharField(max_length=32, blank=True)
    # A failed model call's class (`agents.providers.causes`: `auth_refused`,
    # `rate_limited`, `model_not_found`, …); blank for any other failure.
    error_class = models.CharField(max_length=32, blank=True)
    # A turn that had to stop before its model answered (out of steps, of
    # tool calls, of credits) asks the model once more with no tools; when
    # that gives a reply, the turn completes cut short: why, and a code.
    cut_short = models.TextField(blank=True)
    cut_short_code = models.CharField(max_length=32, blank=True)
    # While it waits for the game: where its run stands, to go on from
    # (`engine._TurnRun.resumed`): the step, the tool calls run, the
    # checkpoint it started with, the rates it is charged at.
    run_state = models.JSONField(null=True, blank=True)
    # A client's Idempotency-Key: a repeat of the send (same key, same
    # agent, within a day) returns this turn instead of running another.
    # `request_digest` tells a true repeat from another body under the key.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_digest = models.CharField(max_length=64, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # Requests waiting on this turn: repeats of its send under its
    # Idempotency-Key (at most FOLLOWERS_PER_TURN; they count against the
    # agent's STUDIO_MAX_QUEUED_SENDS). A process that dies leaves its count
    # behind, which matters only while the turn lives.
    followers = models.PositiveSmallIntegerField(default=0)
    # How long the turn waited for a compaction before its first model call
    # (only a send that would otherwise pass maxTokens waits).
    compaction_wait_ms = models.PositiveIntegerField(default=0)
    # Credits reserved on the game's account while the turn is live.
    held = models.DecimalField(max_digits=18, decimal_places=6, default=0)
    # Renewed by the process running (or waiting to run) the turn; a lapsed
    # lease means that process is gone and the turn may be ended by others.
    # After the turn ends with `open_call_tokens` set: until when its
    # abandoned call is expected to be settled.
    lease_until = models.DateTimeField(null=True, blank=True)
    # Set when the turn ended while a model call was still in flight (a
    # cancel, the deadline): that call's input tokens. The provider bills
    # the call, so the turn's hold stays until it is charged; if its
    # process dies first, it is charged these tokens at the input price.
    open_call_tokens = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["agent", "status", "id"])]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="one_turn_per_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return f"turn {self.uuid} ({self.status})"

    @property
    def has_ended(self) -> bool:
        return self.status in ENDED_STATUSES


class Block(models.Model):
    """One turn's worth of history, in order: the player's message, each
    tool call with its result, the reply.

    `entries` is a list of {"type": "message", "role", "content"} and
    {"type": "tool_call", "id", "name", "arguments", "result", "isError"}.
    `tokens` is counted once, when the turn ends.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="blocks")
    number = models.PositiveIntegerField()
    turn = models.OneToOneField(Turn, on_delete=models.SET_NULL, null=True, related_name="block")
    status = models.CharField(max_length=16, choices=TurnStatus.choices, default=TurnStatus.RUNNING)
    entries = models.JSONField(default=list)
    tokens = models.PositiveIntegerField(default=0)
    folded = models.BooleanField(default=False)
    # What its turn's first model call was given: the config revision and
    # the checkpoint in force (null: none). Set when the turn ends; a null
    # `revision` means it was not recorded (older blocks, a turn whose
    # process stopped).
    revision = models.PositiveIntegerField(null=True, blank=True)
    checkpoint = models.ForeignKey(
        "Checkpoint", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "number"], name="block_number_unique_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.agent} block {self.number}"


class TurnEntry(models.Model):
    """An entry of a running turn's block (a tool call, or a step's text
    before its calls), on a row of its own: recording one writes that entry
    alone, not the whole block again. The turn's ending writes its block's
    entries whole, once, and deletes these; until then the block's
    `entries` hold the player's message and readers add these after it
    (`entries_so_far`)."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField()
    entry = models.JSONField()
    # A game tool call the turn waits on: its id, and until when the game
    # may answer it (`waiting` until it is answered, or past its deadline).
    call_id = models.CharField(max_length=200, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    waiting = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["turn", "position"], name="turn_entry_position_unique")
        ]
        indexes = [
            models.Index(
                fields=["deadline"], condition=models.Q(waiting=True), name="turn_entry_waiting_deadline"
            )
        ]


def entries_so_far(turn_ids) -> dict:
    """The entries recorded so far by each of these running turns, after
    its block's first (turn id → list in order); nothing for a turn that
    has ended."""
    recorded: dict = {}
    rows = TurnEntry.objects.filter(turn_id__in=list(turn_ids)).order_by("turn_id", "position")
    for turn_id, entry in rows.values_list("turn_id", "entry"):
        recorded.setdefault(turn_id, []).append(entry)
    return recorded


def blocks_fill_running(blocks) -> list:
    """`blocks`, each running one given the entries its turn has recorded
    so far (one query, and none when no block is running)."""
    blocks = list(blocks)
    running = [
        b for b in blocks if b.status in (TurnStatus.RUNNING, TurnStatus.WAITING) and b.turn_id is not None
    ]
    if running:
        recorded = entries_so_far(b.turn_id for b in running)
        for block in running:
            block.entries = block.entries + recorded.get(block.turn_id, [])
    return blocks


class CheckpointKind(models.TextChoices):
    COMPACTION = "compaction", "Compaction"
    FORCED = "forced", "Forced"


class Checkpoint(models.Model):
    """The agent's state as of a compaction: the summary, the memories as
    they stood, and the context block rendered from them. The newest one is
    in force; the block text is stored so it stays byte-identical until the
    next compaction (which lets providers cache the prefix)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="checkpoints")
    kind = models.CharField(max_length=16, choices=CheckpointKind.choices)
    through_block = models.PositiveIntegerField()
    summary = models.TextField(null=True, blank=True)
    open_memories = models.JSONField(default=list)
    closed_memories = models.JSONField(default=list)
    # Closed memories the context block counts but does not list (past the
    # listing's share of maxTokens: `context.closed_listing`).
    closed_unlisted = models.PositiveIntegerField(default=0)
    context_block = models.TextField()
    block_tokens = models.PositiveIntegerField(default=0)
    # The first block at whose end it is in force (`Agent.change_block`);
    # null for checkpoints written before the studio recorded it.
    from_block = models.PositiveIntegerField(null=True, blank=True)
    # Set when retention emptied it (summary, memories and context block
    # gone; what it folded and when kept): no block still kept can be shown
    # with it. The row stays so every checkpoint keeps its number.
    pruned_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        get_latest_by = "id"
        indexes = [models.Index(fields=["agent", "-id"])]

    def __str__(self) -> str:
        return f"{self.agent} checkpoint through {self.through_block}"


class CompactionStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class CompactionReason(models.TextChoices):
    THRESHOLD = "threshold", "Context passed the soft threshold"
    FORCED = "forced", "The 200-block window"
    MANUAL = "manual", "Asked for"


class Compaction(models.Model):
    """One request to compact an agent, and how it went. At most one is
    live (queued or running) per agent; running it again is safe."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="compactions")
    reason = models.CharField(max_length=16, choices=CompactionReason.choices)
    status = models.CharField(
        max_length=16, choices=CompactionStatus.choices, default=CompactionStatus.QUEUED
    )
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # Renewed while it runs; a lapsed lease means its worker is gone.
    lease_until = models.DateTimeField(null=True, blank=True)
    # Credits held on the game's account while its model call runs (the most
    # the call can cost), given back with its charge.
    held = models.DecimalField(max_digits=18, decimal_places=6, default=0)
    # Queued, but the game cannot pay for its model call: it waits, and
    # the agent's sends are refused (402 insufficient_credits) until it can.
    awaits_credits = models.BooleanField(default=False)
    # A forced checkpoint was asked for while this one ran: when it ends, the
    # forced one follows if the window is still full (it is never absorbed).
    forced_after = models.BooleanField(default=False)
    checkpoint = models.ForeignKey(
        Checkpoint, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # The X-Request-ID of the request that queued it: every line of every
    # attempt carries it, whoever runs it (the sweep may hand it out again).
    request_id = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent"],
                condition=models.Q(status__in=["queued", "running"]),
                name="one_live_compaction_per_agent",
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} compaction ({self.status})"

    @property
    def is_live(self) -> bool:
        return self.status in (CompactionStatus.QUEUED, CompactionStatus.RUNNING)


class ReplayStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


LIVE_REPLAY_STATUSES = (ReplayStatus.QUEUED, ReplayStatus.RUNNING)


class Replay(models.Model):
    """The player's messages of blocks `from_block`..`through_block` of
    `agent`, played again by `replay_agent` — a hidden copy of `agent` as
    it stood when block `from_block` - 1 ended, with `changes` made to its
    definition. At most one is live (queued or running) per agent.

    The copy lives only as long as the replay does: once the replay has
    ended (and the copy's model calls are charged), the copy goes, and
    `kept` holds what the replay's page still reads of it
    (`agents.replays.replay_copy_remove`)."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="replays")
    # Null once the copy is removed; `replay_agent_name` stays (its cost lines carry it).
    replay_agent = models.OneToOneField(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="replay"
    )
    replay_agent_name = models.CharField(max_length=64)
    from_block = models.PositiveIntegerField()
    through_block = models.PositiveIntegerField()
    # The definition's changes as the request gave them (its wire shape),
    # and the whole definition the copy plays with (the agent's config then,
    # with the changes).
    changes = models.JSONField(default=dict)
    config = models.JSONField(default=dict)
    # Set when the copy is removed: each block played, its player's message
    # and the replay's side ({"rows": {number: row}}, `wire.replay_kept_row`),
    # the copy's store as the last block played left it ("store": baseline
    # entries, or null with "storeRefused": {code, message}; null with none
    # played, when it was the original's) and what the copy was charged
    # ("cost").
    kept = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=ReplayStatus.choices, default=ReplayStatus.QUEUED)
    # How many of the blocks have been sent to the copy.
    played = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    error_code = models.CharField(max_length=32, blank=True)
    # A process is playing it now (`agents.replays.replay_run`).
    is_playing = models.BooleanField(default=False)
    # Renewed while a process plays it; a lapsed lease means that process
    # (or, while it waits, its task) is gone.
    lease_until = models.DateTimeField(null=True, blank=True)
    # The X-Request-ID of the request that asked for it: every line of its
    # play carries it, whichever process or task plays it.
    request_id = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent"],
                condition=models.Q(status__in=["queued", "running"]),
                name="one_live_replay_per_agent",
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} replay of blocks {self.from_block}-{self.through_block} ({self.status})"

    @property
    def total(self) -> int:
        return self.through_block - self.from_block + 1

    @property
    def is_live(self) -> bool:
        return self.status in LIVE_REPLAY_STATUSES
