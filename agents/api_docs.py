"""The shapes the agents API answers with, for the OpenAPI schema (the
views build the same dicts in `agents.api`)."""

from rest_framework import serializers

from studio.lists import list_out


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


class AgentOut(serializers.Serializer):
    name = serializers.CharField()
    systemPrompt = serializers.CharField()
    model = serializers.CharField()
    memory = MemoryConfigOut(allow_null=True)
    compaction = CompactionConfigOut()
    createdAt = serializers.DateTimeField()
    updatedAt = serializers.DateTimeField()
    stats = AgentStats()


class AgentSummaryOut(AgentOut):
    stats = None
    blocks = serializers.IntegerField()


AgentListOut = list_out("AgentListOut", "agents", AgentSummaryOut)


class ToolCallOut(serializers.Serializer):
    name = serializers.CharField()
    arguments = serializers.JSONField()
    result = serializers.CharField()
    isError = serializers.BooleanField()


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
    status = serializers.ChoiceField(choices=["queued", "running", "completed", "cancelled", "failed"])
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
            "too_many_steps",
            "deadline",
            "process_stopped",
            "busy",
            "unstorable_output",
            "internal_error",
        ],
        help_text="Why the turn failed, for code: the game could not cover another model call, the "
        "context could not be made to fit, the model call failed, too many model steps, the turn "
        "deadline passed, its process stopped, it waited too long in the queue, the model sent what "
        "could not be stored, or an internal error.",
    )
    toolCalls = ToolCallOut(many=True)
    cost = CostOut()
    compactionWaitMs = serializers.IntegerField(help_text="Time spent waiting for a compaction to make room.")
    createdAt = serializers.DateTimeField()
    endedAt = serializers.DateTimeField(allow_null=True)


class TurnEnvelope(serializers.Serializer):
    turn = TurnOut()


TurnListOut = list_out("TurnListOut", "turns", TurnOut)


class EntryOut(serializers.Serializer):
    type = serializers.ChoiceField(choices=["message", "tool_call"])
    role = serializers.CharField(required=False)
    content = serializers.CharField(required=False)
    name = serializers.CharField(required=False)
    arguments = serializers.JSONField(required=False)
    result = serializers.CharField(required=False)
    isError = serializers.BooleanField(required=False)


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
