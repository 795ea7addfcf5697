"""The shapes the agents API answers with, for the OpenAPI schema (the
dicts themselves are built by `agents.wire`; a test checks each answer
against its shape here)."""

from rest_framework import serializers

from agents.history import diffs
from agents.models import DefinedVia
from agents.providers import causes
from studio.http.lists import list_out


class MemoryConfigOut(serializers.Serializer):
    maxOpenTokens = serializers.IntegerField()


class CompactionConfigOut(serializers.Serializer):
    type = serializers.ChoiceField(choices=["summarize", "sliding-window"])
    maxTokens = serializers.IntegerField()


class CheckpointRef(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["compaction", "forced"])
    throughBlock = serializers.IntegerField()
    createdAt = serializers.DateTimeField()


class AgentStats(serializers.Serializer):
    blocks = serializers.IntegerField()
    verbatimTokens = serializers.IntegerField()
    openTokens = serializers.IntegerField()
    storeBytes = serializers.IntegerField()
    lastCheckpoint = CheckpointRef(allow_null=True)


class GameToolOut(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.JSONField(help_text="A JSON Schema of an object.")
    timeoutSeconds = serializers.IntegerField(required=False)


class DefinerOut(serializers.Serializer):
    type = serializers.ChoiceField(choices=["user", "apiKey"])
    name = serializers.CharField(
        help_text="A user's username; an API key's label (its role when it has none)."
    )
    key = serializers.CharField(
        required=False, help_text="An API key's prefix (`sk_3f2a9c1b0d4e`), never its secret."
    )


class RevisionOut(serializers.Serializer):
    number = serializers.IntegerField()
    by = DefinerOut(allow_null=True, help_text="Who defined it; null when nobody was recorded.")
    via = serializers.ChoiceField(
        choices=DefinedVia.values,
        help_text="Where from: `api` (game code), `page` (the studio's pages), `admin` (the Django admin), "
        '`replay` (a replay\'s "Use this definition"), `import`, `fork`, `demo`, `command`; `unknown` '
        "for revisions written before the studio recorded it.",
    )
    at = serializers.DateTimeField(allow_null=True, help_text="When it was defined; null when not kept.")
    note = serializers.CharField(
        help_text='What else a person reads beside it ("Restored revision 3"); or "".'
    )


class DefinitionOut(serializers.Serializer):
    systemPrompt = serializers.CharField()
    model = serializers.CharField()
    memory = MemoryConfigOut(allow_null=True)
    compaction = CompactionConfigOut()
    tools = GameToolOut(many=True)


class RevisionDetailOut(RevisionOut):
    definition = DefinitionOut(help_text="The config it set, as `PUT /agents/{name}` takes it.")


RevisionListOut = list_out("RevisionListOut", "revisions", RevisionOut)


class ForkedFromOut(serializers.Serializer):
    agent = serializers.CharField(help_text="The agent it was forked from, by name (it may be gone since).")
    block = serializers.IntegerField(help_text="The block it was forked at.")


class AgentOut(serializers.Serializer):
    name = serializers.CharField()
    systemPrompt = serializers.CharField()
    model = serializers.CharField()
    memory = MemoryConfigOut(allow_null=True)
    compaction = CompactionConfigOut()
    tools = GameToolOut(many=True, help_text="The game's tools the model may call (none: []).")
    revision = RevisionOut(
        help_text="The config's newest revision: who defined it, from where, when. Its number is the ETag."
    )
    forkedFrom = ForkedFromOut(required=False, help_text="Only on a fork: what it was made from.")
    createdAt = serializers.DateTimeField()
    updatedAt = serializers.DateTimeField()
    stats = AgentStats()


class AgentSummaryOut(AgentOut):
    stats = None
    blocks = serializers.IntegerField()


AgentListOut = list_out("AgentListOut", "agents", AgentSummaryOut)


class ToolCallCutOut(serializers.Serializer):
    block = serializers.IntegerField(
        allow_null=True, help_text="The block whose history has the call whole (null: a transient turn's)."
    )
    result = serializers.IntegerField(required=False, help_text="The whole result's length, in characters.")
    arguments = serializers.IntegerField(
        required=False, help_text="The length of the arguments' whole text, in characters."
    )


class ToolCallOut(serializers.Serializer):
    name = serializers.CharField()
    arguments = serializers.JSONField()
    result = serializers.CharField()
    isError = serializers.BooleanField()
    cut = ToolCallCutOut(
        required=False,
        help_text="Present when the result or the arguments' strings were cut to STUDIO_SHOWN_TEXT_MAX_CHARS.",
    )
    notInOriginal = serializers.BooleanField(
        required=False,
        help_text="On a replay's copy: a call of a game tool the original never made (so the game never "
        "answered it); its result is an error saying so.",
    )


class PendingToolCallOut(serializers.Serializer):
    callId = serializers.CharField(help_text="What the game answers the call by (`POST …/tool-results`).")
    name = serializers.CharField()
    arguments = serializers.JSONField(help_text="Whole, however long (`tool.requested` cuts long ones).")
    deadline = serializers.DateTimeField(help_text="Past it the model is told the game did not answer.")


TURN_STOPS = ["too_many_steps", "too_many_tool_calls", "budget_exhausted"]


class CutShortOut(serializers.Serializer):
    code = serializers.ChoiceField(choices=TURN_STOPS)
    message = serializers.CharField()


class CostLineBrief(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["model", "memory_access", "compaction"])
    label = serializers.CharField()
    quantity = serializers.IntegerField()
    amount = serializers.CharField(help_text="Credits, six decimal places.")


class CostOut(serializers.Serializer):
    total = serializers.CharField()
    lines = CostLineBrief(many=True)


class TurnOut(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(
        choices=["queued", "running", "waiting", "completed", "cancelled", "failed"]
    )
    transient = serializers.BooleanField()
    block = serializers.IntegerField(allow_null=True)
    reply = serializers.CharField()
    error = serializers.CharField(required=False, help_text="Why the turn failed.")
    errorCode = serializers.ChoiceField(
        required=False,
        choices=[
            "budget_exhausted",
            "context_too_large",
            "model_error",
            "model_output_invalid",
            "too_many_steps",
            "too_many_tool_calls",
            "deadline",
            "process_stopped",
            "database_unavailable",
            "busy",
            "unstorable_output",
            "internal_error",
        ],
        help_text="Why the turn failed, for code: the game could not cover another model call, the "
        "context could not be made to fit, the model call failed, the model's answer could not be read, "
        "too many model steps or tool calls (and no reply when asked for one with no tools), the turn "
        "deadline passed, its process stopped, the database went away in the middle of it and it could not "
        "go on, it waited too long in the queue, the model sent what "
        "could not be stored, or an internal error.",
    )
    errorClass = serializers.ChoiceField(
        required=False,
        choices=list(causes.CAUSES),
        help_text="With `model_error` (or `model_output_invalid`): the class of the failed model call, which "
        "`error` names and explains — the provider refused the studio's key (`auth_refused`), limited its "
        "rate (`rate_limited`) or quota (`quota_exhausted`), does not know the model (`model_not_found`), "
        "the context was too long for it (`context_too_long`), its safety filter refused "
        "(`output_refused`), the output limit was reached (`output_limit`), it refused the request "
        "otherwise (`request_refused`), failed on its side (`provider_down`), timed out "
        "(`provider_timeout`), could not be reached (`provider_unreachable`), its answer broke off or "
        "could not be read (`answer_unreadable`), or the studio is not set up for it (`not_configured`).",
    )
    cutShort = CutShortOut(
        required=False,
        help_text="A completed turn that had to stop before its model answered (out of steps, tool calls or "
        "credits): its reply is the answer to one more call made with no tools offered.",
    )
    toolCalls = ToolCallOut(many=True, help_text="Its calls with their results (not those still waiting).")
    pendingToolCalls = PendingToolCallOut(
        many=True,
        required=False,
        help_text="While `waiting`: the calls of the game's tools it waits on, for the game to answer.",
    )
    cost = CostOut()
    compactionWaitMs = serializers.IntegerField(help_text="Time spent waiting for a compaction to make room.")
    createdAt = serializers.DateTimeField()
    endedAt = serializers.DateTimeField(allow_null=True)


class TurnEnvelope(serializers.Serializer):
    turn = TurnOut()


TurnListOut = list_out("TurnListOut", "turns", TurnOut)


class WaitingForGameOut(serializers.Serializer):
    callId = serializers.CharField()
    deadline = serializers.DateTimeField()
    timeoutSeconds = serializers.IntegerField(allow_null=True)


class EntryOut(serializers.Serializer):
    type = serializers.ChoiceField(choices=["message", "tool_call"])
    role = serializers.CharField(required=False)
    content = serializers.CharField(required=False)
    name = serializers.CharField(required=False)
    arguments = serializers.JSONField(required=False)
    result = serializers.CharField(
        required=False, allow_null=True, help_text="Null while the call waits for the game's answer."
    )
    isError = serializers.BooleanField(required=False)
    waitingForGame = WaitingForGameOut(
        required=False, help_text="A call of a game tool its turn still waits on: until when, and its id."
    )
    notInOriginal = serializers.BooleanField(
        required=False, help_text="On a replay's copy: a game tool call the original never made."
    )


class BlockOut(serializers.Serializer):
    block = serializers.IntegerField()
    turnId = serializers.UUIDField(allow_null=True)
    status = serializers.CharField()
    folded = serializers.BooleanField()
    tokens = serializers.IntegerField()
    createdAt = serializers.DateTimeField()
    entries = EntryOut(many=True)


HistoryOut = list_out(
    "HistoryOut",
    "blocks",
    BlockOut,
    nextAfter=serializers.IntegerField(allow_null=True, help_text="Pass as `after` for the next page."),
)


class ContextTokens(serializers.Serializer):
    system = serializers.IntegerField()
    contextBlock = serializers.IntegerField()
    messages = serializers.IntegerField()
    tools = serializers.IntegerField(
        help_text="The offered tools' definitions (names, descriptions, JSON schemas) as the "
        "model's provider sends them; 0 when no tools are offered."
    )
    total = serializers.IntegerField(help_text="system + contextBlock + messages + tools.")
    maxTokens = serializers.IntegerField()
    estimate = serializers.BooleanField(
        help_text="true when the counts are not the model's own tokenizer's: every real provider "
        "(its tokenizer differs or is not available offline, and its server wraps messages and tools "
        "in a template of its own). false for `scripted`, which counts with `tokenizer`."
    )
    tokenizer = serializers.CharField(help_text="What the counts are made with: `cl100k_base`.")


class ContextOut(serializers.Serializer):
    system = serializers.CharField()
    contextBlock = serializers.CharField(allow_null=True)
    messages = serializers.ListField(child=serializers.DictField())
    tools = serializers.ListField(child=serializers.CharField())
    tokens = ContextTokens()


class MemoryInCheckpoint(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    content = serializers.CharField()


class ClosedMemoryInCheckpoint(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()


class CheckpointOut(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["compaction", "forced"])
    throughBlock = serializers.IntegerField()
    summary = serializers.CharField(allow_null=True)
    openMemories = MemoryInCheckpoint(many=True)
    closedMemories = ClosedMemoryInCheckpoint(many=True)
    closedUnlisted = serializers.IntegerField(
        help_text="Closed memories the context block counts but does not list: past the listing's share of "
        "maxTokens, those written longest ago."
    )
    contextBlock = serializers.CharField()
    tokens = serializers.IntegerField()
    createdAt = serializers.DateTimeField()


class CompactionOut(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=["queued", "running", "done", "failed"])
    reason = serializers.ChoiceField(choices=["threshold", "forced", "manual"])
    attempts = serializers.IntegerField()
    error = serializers.CharField(allow_null=True)
    waitingForCredits = serializers.BooleanField(
        help_text="Queued, but the game cannot pay for its model call: it waits, and the agent's sends "
        "are refused (402 `insufficient_credits`) until it can."
    )
    throughBlock = serializers.IntegerField(allow_null=True)
    createdAt = serializers.DateTimeField()
    finishedAt = serializers.DateTimeField(allow_null=True)


class CompactionEnvelope(serializers.Serializer):
    compaction = CompactionOut()


CompactionListOut = list_out("CompactionListOut", "compactions", CompactionOut)


# --- through time ------------------------------------------------------------------------


class CheckpointBriefOut(serializers.Serializer):
    id = serializers.IntegerField(help_text="Its place among the agent's checkpoints: 1 for the first.")
    kind = serializers.ChoiceField(choices=["compaction", "forced"])
    throughBlock = serializers.IntegerField(help_text="It folds the blocks up to this one.")
    fromBlock = serializers.IntegerField(
        allow_null=True,
        help_text="The first block at whose end it was in force; null for a checkpoint written before "
        "the studio kept that.",
    )
    tokens = serializers.IntegerField(help_text="Of its context block.")
    createdAt = serializers.DateTimeField()


class ContextAtOut(ContextOut):
    block = serializers.IntegerField(required=False, help_text="With atBlock: the block.")
    checkpoint = CheckpointBriefOut(
        required=False, allow_null=True, help_text="With atBlock: the checkpoint in force then, if any."
    )


class MemoryEventOut(serializers.Serializer):
    name = serializers.CharField()
    change = serializers.ChoiceField(
        choices=["created", "updated", "opened", "closed", "deleted", "dropped", "imported"],
        help_text="`imported`: an import installed the memory as its file held it (the note says who "
        "imported it, and from which file).",
    )
    by = serializers.ChoiceField(
        choices=["agent", "compactor", "import", "file"],
        help_text="`file`: a change an imported agent file tells of, made before the import; this studio "
        "saw none of it and credits it to no one but the file (`fileBy` says whom the file names). The "
        "memory's `imported` change marks where the studio's own history of it begins.",
    )
    turnId = serializers.UUIDField(allow_null=True)
    block = serializers.IntegerField(
        allow_null=True,
        help_text="The first block whose end shows the change: an agent's change, its turn's block; a "
        "compactor's, the block it ran in or the next one. Null for a compactor's change made before "
        "the studio kept that.",
    )
    checkpoint = serializers.IntegerField(allow_null=True, help_text="A compactor's change: its checkpoint.")
    before = serializers.JSONField(
        allow_null=True,
        help_text="description, content, open, version — an open or a close keeps open and version only, "
        "an agent's update the fields it wrote with them",
    )
    after = serializers.JSONField(allow_null=True, help_text="null once deleted; a dropped rewrite's content")
    note = serializers.CharField(allow_null=True, help_text="Why a rewrite was dropped, and the like.")
    fileBy = serializers.ChoiceField(
        choices=["agent", "compactor", "import"],
        allow_null=True,
        help_text="A change by `file`: who the file says made it (its claim, not the studio's record); "
        "null for every other change, and for a file that named no one.",
    )
    at = serializers.DateTimeField()


class DiffLineOut(serializers.Serializer):
    op = serializers.ChoiceField(
        choices=["same", "removed", "added", "replaced"],
        help_text="`replaced`: the only change of a diff too large to compare line by line — over "
        f"{diffs.DIFF_MAX_LINES:,} lines (both sides together), or over "
        f"{diffs.DIFF_MAX_COMPARISONS:,} comparisons of a line with another (texts of many repeated "
        "lines), or past what one read's diffs may compare in all "
        f"({diffs.DIFF_READ_MAX_COMPARISONS:,}). The texts are `before` and `after`.",
    )
    text = serializers.CharField(required=False, help_text="The line; absent for `replaced`.")
    beforeChars = serializers.IntegerField(required=False, help_text="`replaced`: characters before.")
    afterChars = serializers.IntegerField(required=False, help_text="`replaced`: characters after.")


class SummaryChangeOut(serializers.Serializer):
    before = serializers.CharField(allow_null=True, help_text="The previous checkpoint's summary.")
    after = serializers.CharField(allow_null=True)
    lines = DiffLineOut(many=True)


class RewriteOut(serializers.Serializer):
    name = serializers.CharField()
    applied = serializers.BooleanField(help_text="false: the rewrite was dropped (see note).")
    before = serializers.CharField(allow_null=True)
    after = serializers.CharField(allow_null=True)
    note = serializers.CharField(allow_null=True)
    lines = DiffLineOut(many=True)


class CheckpointChangesOut(serializers.Serializer):
    summary = SummaryChangeOut()
    rewrites = RewriteOut(
        many=True,
        allow_null=True,
        help_text="Each open memory the compactor rewrote for it; null for a checkpoint written before "
        "the studio kept that.",
    )


class CheckpointDetailOut(CheckpointBriefOut, CheckpointOut):
    previous = serializers.IntegerField(allow_null=True)
    changes = CheckpointChangesOut(help_text="Against the previous checkpoint.")


# --- replays -----------------------------------------------------------------------------


class DefinitionChangesOut(serializers.Serializer):
    systemPrompt = serializers.CharField(required=False)
    model = serializers.CharField(required=False)
    memory = MemoryConfigOut(required=False, allow_null=True)
    compaction = CompactionConfigOut(required=False)
    tools = GameToolOut(many=True, required=False)


class ReplayProgressOut(serializers.Serializer):
    played = serializers.IntegerField(help_text="Blocks sent to the replay's copy so far.")
    total = serializers.IntegerField(help_text="Blocks the replay plays: through - fromBlock + 1.")


class ReplayCostOut(serializers.Serializer):
    total = serializers.CharField(help_text="Credits charged for the replay's turns and compactions.")


class ReplayOut(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(help_text="The agent replayed.")
    replayAgent = serializers.CharField(
        help_text="The name of the replay's copy of the agent, which plays the messages: no character of the "
        "game (the agents list leaves it out, and it takes no send of its own), but one of its agents while "
        "the replay lives (it takes a place in STUDIO_MAX_AGENTS_PER_GAME), whose history, checkpoints, "
        "context and memories as of any block are read at /agents/{replayAgent}/… as any agent's. Once the "
        "replay has ended the copy is removed (404 there); the replay keeps its rows, its store as the last "
        "block played left it, and its cost."
    )
    status = serializers.ChoiceField(choices=["queued", "running", "completed", "cancelled", "failed"])
    fromBlock = serializers.IntegerField()
    through = serializers.IntegerField()
    definition = DefinitionChangesOut(help_text="The changes the replay plays with, as asked for.")
    progress = ReplayProgressOut()
    cost = ReplayCostOut()
    error = serializers.CharField(allow_null=True, help_text="Why it failed.")
    errorCode = serializers.CharField(
        allow_null=True,
        help_text="Why it failed, for code: a send's refusal (`budget_exhausted`, `insufficient_credits`, "
        "`game_busy`, …), `process_stopped`, `history_pruned` or `internal_error`.",
    )
    createdAt = serializers.DateTimeField()
    startedAt = serializers.DateTimeField(allow_null=True)
    endedAt = serializers.DateTimeField(allow_null=True)


class ReplayEnvelope(serializers.Serializer):
    replay = ReplayOut()


ReplayListOut = list_out("ReplayListOut", "replays", ReplayOut)


class ReplaySideOut(serializers.Serializer):
    turnId = serializers.UUIDField(allow_null=True)
    status = serializers.ChoiceField(choices=["running", "completed", "cancelled", "failed"])
    reply = serializers.CharField()
    toolCalls = ToolCallOut(many=True)
    tokens = serializers.IntegerField(help_text="The block's tokens.")
    cost = CostOut(allow_null=True)
    error = serializers.CharField(allow_null=True)


class ReplayRowOut(serializers.Serializer):
    block = serializers.IntegerField()
    message = serializers.CharField(allow_null=True, help_text="The player's message.")
    original = ReplaySideOut(allow_null=True, help_text="The block as the agent played it; null once pruned.")
    replay = ReplaySideOut(allow_null=True, help_text="The block as the replay played it; null until played.")
    sameReply = serializers.BooleanField(allow_null=True)
    sameToolCalls = serializers.BooleanField(allow_null=True, help_text="Names, arguments, results alike.")


class MemorySideOut(serializers.Serializer):
    description = serializers.CharField()
    content = serializers.CharField()
    open = serializers.BooleanField()


class MemoryComparedOut(serializers.Serializer):
    name = serializers.CharField()
    change = serializers.ChoiceField(
        choices=["same", "changed", "added", "removed"],
        help_text="The replay's memory against the original's: `added`, only the replay has it; `removed`, "
        "only the original.",
    )
    original = MemorySideOut(allow_null=True)
    replay = MemorySideOut(allow_null=True)
    lines = DiffLineOut(many=True, help_text="The content's diff, original to replay; empty when alike.")


class StoresComparedOut(serializers.Serializer):
    atBlock = serializers.IntegerField(help_text="Both stores as this block left them.")
    same = serializers.BooleanField()
    memories = MemoryComparedOut(many=True)


class ReplayDetailOut(ReplayOut):
    rows = ReplayRowOut(many=True, help_text="One per block, fromBlock to through.")
    memories = StoresComparedOut(allow_null=True)
    memoriesRefused = serializers.CharField(
        allow_null=True, help_text="Why the stores cannot be compared (the original's history was pruned)."
    )


class ReplayDetailEnvelope(serializers.Serializer):
    replay = ReplayDetailOut()
