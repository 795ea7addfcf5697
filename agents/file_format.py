"""The agent file's shape: what `GET /agents/{name}/export` writes and
`POST /agents/import` accepts, as the serializers the import view checks a
file with and the schema documents it by. What ties the parts together
(numbering, references, the store cap) is `agent_files`'s to check."""

from rest_framework import serializers

from memories.models import Change, Writer
from memories.tools import DESCRIPTION_MAX, NAME_MAX
from studio.api_fields import StrictCharField, StrictSerializer
from studio.text import storable, unstorable_reason

from .api import AgentDefinitionSerializer
from .history_reads import FORMAT, VERSION
from .models import ENDED_STATUSES, CheckpointKind

BIG = 2**31 - 1


def _text(**kwargs):
    return StrictCharField(allow_blank=True, trim_whitespace=False, **kwargs)


def _count(**kwargs):
    return serializers.IntegerField(min_value=0, max_value=BIG, **kwargs)


class EntryFile(StrictSerializer):
    """One entry of a block: a message, or a tool call with its result."""

    type = serializers.ChoiceField(choices=["message", "tool_call"])
    role = serializers.ChoiceField(choices=["user", "assistant"], required=False)
    content = _text(required=False)
    id = StrictCharField(required=False, max_length=200, help_text="A tool call's id.")
    step = _count(required=False, help_text="The model step that made it.")
    name = _text(required=False, max_length=200)
    arguments = serializers.JSONField(required=False, allow_null=True)
    result = _text(required=False)
    isError = serializers.BooleanField(required=False)

    def validate(self, data):
        needs = (
            ["role", "content"]
            if data["type"] == "message"
            else ["id", "name", "arguments", "result", "isError"]
        )
        missing = [key for key in needs if key not in data]
        if missing:
            raise serializers.ValidationError(f"a {data['type']} entry needs {', '.join(missing)}")
        return data


class TurnFile(StrictSerializer):
    id = serializers.UUIDField(help_text="The turn's id where it was exported; an import gives it a new one.")
    status = serializers.ChoiceField(choices=list(ENDED_STATUSES))
    reply = _text()
    error = _text()
    errorCode = _text(max_length=32)
    compactionWaitMs = _count()
    createdAt = serializers.DateTimeField()
    startedAt = serializers.DateTimeField(allow_null=True)
    endedAt = serializers.DateTimeField(allow_null=True)


class BlockContextFile(StrictSerializer):
    revision = serializers.IntegerField(min_value=1, max_value=BIG, help_text="Of `configHistory`.")
    checkpoint = serializers.IntegerField(
        min_value=1, max_value=BIG, allow_null=True, help_text="The id of the checkpoint in force, if any."
    )


class BlockFile(StrictSerializer):
    block = serializers.IntegerField(min_value=1, max_value=BIG)
    status = serializers.ChoiceField(choices=list(ENDED_STATUSES))
    folded = serializers.BooleanField()
    tokens = _count(
        required=False,
        help_text="Its entries' tokens. Ignored on import: the studio counts the entries itself (a count may "
        "differ by a token from the exporting studio's, which counted them as they were sent).",
    )
    createdAt = serializers.DateTimeField()
    entries = EntryFile(many=True, allow_empty=False)
    turn = TurnFile(allow_null=True)
    context = BlockContextFile(
        allow_null=True, help_text="What its first model call was given; null when that was not recorded."
    )


class ClosedMemoryFile(StrictSerializer):
    name = _text(max_length=NAME_MAX)
    description = _text(max_length=DESCRIPTION_MAX)


class CheckpointMemoryFile(ClosedMemoryFile):
    content = _text()


class CheckpointFile(StrictSerializer):
    id = serializers.IntegerField(
        min_value=1, max_value=BIG, help_text="Its place among the checkpoints: 1, 2, 3…"
    )
    kind = serializers.ChoiceField(choices=CheckpointKind.values)
    throughBlock = _count()
    fromBlock = _count(allow_null=True, help_text="The first block at whose end it was in force.")
    tokens = _count(required=False, help_text="Of its context block. Ignored on import: counted again.")
    createdAt = serializers.DateTimeField()
    summary = _text(allow_null=True)
    openMemories = CheckpointMemoryFile(many=True)
    closedMemories = ClosedMemoryFile(many=True)
    contextBlock = _text()


class MemoryFile(StrictSerializer):
    name = StrictCharField(max_length=NAME_MAX)
    description = _text(max_length=DESCRIPTION_MAX)
    content = _text()
    open = serializers.BooleanField()
    version = serializers.IntegerField(min_value=1, max_value=BIG)
    tokens = _count(required=False, help_text="Ignored on import: counted again.")
    bytes = _count(required=False, help_text="Ignored on import: counted again.")
    updatedAt = serializers.DateTimeField()
    updatedBy = serializers.ChoiceField(choices=Writer.values)


class MemoryEventFile(StrictSerializer):
    name = StrictCharField(max_length=NAME_MAX)
    change = serializers.ChoiceField(choices=Change.values)
    by = serializers.ChoiceField(choices=Writer.values)
    turnId = serializers.UUIDField(allow_null=True)
    block = _count(allow_null=True, help_text="The first block whose end shows the change.")
    checkpoint = serializers.IntegerField(
        min_value=1,
        max_value=BIG,
        allow_null=True,
        help_text="A compactor's change: the checkpoint it was for.",
    )
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(
        allow_null=True, help_text="The memory as the change left it; null once deleted."
    )
    note = _text(allow_null=True, required=False, default=None)
    at = serializers.DateTimeField()

    def validate(self, data):
        after = data["after"]
        if data["change"] == Change.DROPPED or after is None:
            return data
        if not (
            isinstance(after, dict)
            and isinstance(after.get("description"), str)
            and isinstance(after.get("content"), str)
            and isinstance(after.get("open"), bool)
        ):
            raise serializers.ValidationError(
                {"after": "must be the memory as the change left it: its description, content and open"}
            )
        return data


class RevisionFile(StrictSerializer):
    revision = serializers.IntegerField(min_value=1, max_value=BIG)
    createdAt = serializers.DateTimeField()
    config = AgentDefinitionSerializer()


class AgentFile(StrictSerializer):
    format = serializers.CharField(help_text=f'Always "{FORMAT}".')
    version = serializers.IntegerField(help_text=f"Always {VERSION}.")
    name = StrictCharField(
        max_length=200, help_text="The agent's name; set another to import it under that name."
    )
    exportedAt = serializers.DateTimeField(required=False)
    config = AgentDefinitionSerializer(help_text="Its config, as `PUT /agents/{name}` takes it.")
    configHistory = RevisionFile(many=True, required=False, default=list)
    recordedFromBlock = serializers.IntegerField(
        min_value=1,
        max_value=BIG,
        required=False,
        default=1,
        help_text="Blocks before this one were played before the studio kept when each change happened.",
    )
    memories = MemoryFile(many=True, required=False, default=list)
    checkpoints = CheckpointFile(many=True, required=False, default=list)
    blocks = BlockFile(many=True, required=False, default=list)
    memoryHistory = MemoryEventFile(many=True, required=False, default=list)

    def validate_format(self, value):
        if value != FORMAT:
            raise serializers.ValidationError(f'must be "{FORMAT}": this is not a studio agent file')
        return value

    def validate_version(self, value):
        if value != VERSION:
            raise serializers.ValidationError(
                f"this studio reads version {VERSION} of the format, not {value}"
            )
        return value

    def validate(self, data):
        where = _unstorable(self.initial_data, "")
        if where:
            raise serializers.ValidationError(where)
        return data


def _unstorable(value, path: str) -> str | None:
    """Where in a JSON value is text the database cannot keep, and why."""
    if isinstance(value, str):
        reason = unstorable_reason(value)
        return f"{path or 'the file'}: {reason}" if reason else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{storable(key)}" if path else storable(key)
            found = _unstorable(key, where) or _unstorable(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _unstorable(item, f"{path}[{index}]")
            if found:
                return found
    return None
