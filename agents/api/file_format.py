"""The agent file's shape: what `GET /agents/{name}/export` writes and
`POST /agents/import` accepts, as the serializers the import view checks a
file with and the schema documents it by. What ties the parts together
(numbering, references, the store's rules) is `agents.history.imports`'s to check.

Every text a file carries has a length limit, so the studio never keeps
from a file what a normal agent could not have written: a player's message
is a send's (`CONTENT_MAX_CHARS`), what a model wrote is bounded by
`MODEL_TEXT_MAX_CHARS`, anything holding a memory's content by the store
cap, and a checkpoint's context block by what its parts render to.
"""

import json

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.api.serializers import AgentDefinitionSerializer
from agents.history.export import FORMAT, VERSION
from agents.models import ENDED_STATUSES, NUMBER_MAX, CheckpointKind
from agents.sending.context import render_context_block
from agents.sending.engine import CONTENT_MAX_CHARS
from memories.models import FILE_WRITERS, Change, Writer
from memories.store import store_cap_bytes
from memories.tools import DESCRIPTION_MAX, NAME_MAX
from studio.errors import DomainError
from studio.http.api_fields import ChoiceField, StrictBooleanField, StrictCharField, StrictSerializer, valid
from studio.text import storable, unstorable_reason

# What one model answer may hold: a summary, an assistant's message, a
# tool call's arguments (as JSON), a turn's reply or error. Far more than a
# model writes within STUDIO_MODEL_MAX_OUTPUT_TOKENS; a system prompt's bound.
MODEL_TEXT_MAX_CHARS = 200_000
# A memory change's note: the store's reason for a dropped rewrite, and the like.
NOTE_MAX_CHARS = 1_000
# A memory tool's result, in store caps: at most a memory's whole content,
# or every memory's name, with a sentence around it.
TOOL_RESULT_MAX_CAPS = 3
STORE_CAP = "STUDIO_STORE_CAP_BYTES (1 MiB by default)"


def _text(**kwargs):
    kwargs.setdefault("error_messages", {"max_length": "must be at most {max_length:,} characters"})
    return StrictCharField(allow_blank=True, trim_whitespace=False, **kwargs)


def _model_text(**kwargs):
    return _text(max_length=MODEL_TEXT_MAX_CHARS, **kwargs)


def _within_store_cap(value: str) -> None:
    cap = store_cap_bytes()
    if len(value) > cap or len(value.encode("utf-8", "surrogatepass")) > cap:
        raise serializers.ValidationError(
            f"must be at most {cap:,} bytes in UTF-8, the store cap: no memory is larger than its store"
        )


def _memory_text(**kwargs):
    """A memory's content, or text holding one: within the store cap."""
    help_text = f"At most the store cap in UTF-8 bytes ({STORE_CAP})."
    return _text(validators=[_within_store_cap], help_text=help_text, **kwargs)


def _count(**kwargs):
    return serializers.IntegerField(min_value=0, max_value=NUMBER_MAX, **kwargs)


class EntryFile(StrictSerializer):
    """One entry of a block: a message, or a tool call with its result."""

    type = ChoiceField(choices=["message", "tool_call"])
    role = ChoiceField(choices=["user", "assistant"], required=False)
    content = _model_text(
        required=False,
        help_text=f"A player's message: at most {CONTENT_MAX_CHARS:,} characters, as a send takes.",
    )
    id = StrictCharField(required=False, max_length=200, help_text="A tool call's id.")
    step = _count(required=False, help_text="The model step that made it.")
    name = _text(required=False, max_length=200)
    arguments = serializers.JSONField(
        required=False, allow_null=True, help_text=f"At most {MODEL_TEXT_MAX_CHARS:,} characters as JSON."
    )
    result = _text(
        required=False,
        help_text=f"What the tool answered: at most {TOOL_RESULT_MAX_CAPS} times the store cap in characters "
        f"({STORE_CAP}).",
    )
    isError = StrictBooleanField(required=False)
    notInOriginal = StrictBooleanField(
        required=False,
        help_text="A replay's call of a game tool its original never made (the game never answered it).",
    )

    def validate_arguments(self, value):
        if len(json.dumps(value, ensure_ascii=False)) > MODEL_TEXT_MAX_CHARS:
            raise serializers.ValidationError(f"must be at most {MODEL_TEXT_MAX_CHARS:,} characters as JSON")
        return value

    def validate_result(self, value):
        limit = TOOL_RESULT_MAX_CAPS * store_cap_bytes()
        if len(value) > limit:
            raise serializers.ValidationError(
                f"must be at most {limit:,} characters ({TOOL_RESULT_MAX_CAPS} times the store cap)"
            )
        return value

    def validate(self, data):
        if data.get("role") == "user" and len(data.get("content", "")) > CONTENT_MAX_CHARS:
            raise serializers.ValidationError(
                {
                    "content": f"a player's message is at most {CONTENT_MAX_CHARS:,} characters, as a send takes"
                }
            )
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
    status = ChoiceField(choices=list(ENDED_STATUSES))
    reply = _model_text()
    error = _model_text()
    errorCode = _text(max_length=32)
    compactionWaitMs = _count()
    createdAt = serializers.DateTimeField()
    startedAt = serializers.DateTimeField(allow_null=True)
    endedAt = serializers.DateTimeField(allow_null=True)


class BlockContextFile(StrictSerializer):
    revision = serializers.IntegerField(min_value=1, max_value=NUMBER_MAX, help_text="Of `configHistory`.")
    checkpoint = serializers.IntegerField(
        min_value=1,
        max_value=NUMBER_MAX,
        allow_null=True,
        help_text="The id of the checkpoint in force, if any.",
    )


class BlockFile(StrictSerializer):
    block = serializers.IntegerField(min_value=1, max_value=NUMBER_MAX)
    status = ChoiceField(choices=list(ENDED_STATUSES))
    folded = StrictBooleanField()
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
    content = _memory_text()


class CheckpointFile(StrictSerializer):
    id = serializers.IntegerField(
        min_value=1, max_value=NUMBER_MAX, help_text="Its place among the checkpoints: 1, 2, 3…"
    )
    kind = ChoiceField(choices=CheckpointKind.values)
    throughBlock = _count()
    fromBlock = _count(allow_null=True, help_text="The first block at whose end it was in force.")
    tokens = _count(required=False, help_text="Of its context block. Ignored on import: counted again.")
    createdAt = serializers.DateTimeField()
    summary = _model_text(allow_null=True)
    openMemories = CheckpointMemoryFile(many=True)
    closedMemories = ClosedMemoryFile(many=True)
    closedUnlisted = _count(
        required=False, default=0, help_text="Closed memories its context block counts but does not list."
    )
    contextBlock = _text(
        help_text="What the model was given: no longer than its summary and memories rendered as a context "
        "block (the studio renders it from them)."
    )

    def validate(self, data):
        rendered = render_context_block(
            summary=data["summary"],
            open_memories=data["openMemories"],
            closed_memories=data["closedMemories"],
            closed_unlisted=data["closedUnlisted"],
        )
        if len(data["contextBlock"]) > len(rendered):
            raise serializers.ValidationError(
                {
                    "contextBlock": f"longer than its summary and memories rendered as a context block "
                    f"({len(rendered):,} characters): it is rendered from them"
                }
            )
        return data


class MemoryFile(StrictSerializer):
    name = StrictCharField(max_length=NAME_MAX)
    description = _text(max_length=DESCRIPTION_MAX)
    content = _memory_text()
    open = StrictBooleanField()
    version = serializers.IntegerField(min_value=1, max_value=NUMBER_MAX)
    tokens = _count(required=False, help_text="Ignored on import: counted again.")
    bytes = _count(required=False, help_text="Ignored on import: counted again.")
    updatedAt = serializers.DateTimeField()
    updatedBy = ChoiceField(choices=Writer.values)


class MemoryStateFile(StrictSerializer):
    """A memory as a change found or left it (a dropped rewrite: only the
    content it proposed)."""

    description = _text(max_length=DESCRIPTION_MAX, required=False)
    content = _memory_text(required=False)
    open = StrictBooleanField(required=False)
    version = serializers.IntegerField(min_value=1, max_value=NUMBER_MAX, required=False)


class MemoryEventFile(StrictSerializer):
    name = StrictCharField(max_length=NAME_MAX)
    change = ChoiceField(choices=Change.values)
    by = ChoiceField(choices=Writer.values)
    turnId = serializers.UUIDField(allow_null=True)
    block = _count(allow_null=True, help_text="The first block whose end shows the change.")
    checkpoint = serializers.IntegerField(
        min_value=1,
        max_value=NUMBER_MAX,
        allow_null=True,
        help_text="A compactor's change: the checkpoint it was for.",
    )
    before = MemoryStateFile(
        allow_null=True, help_text="The memory as the change found it; null for a new one."
    )
    after = MemoryStateFile(
        allow_null=True,
        help_text="The memory as the change left it; null once deleted; a dropped rewrite's content.",
    )
    note = _text(allow_null=True, required=False, default=None, max_length=NOTE_MAX_CHARS)
    fileBy = ChoiceField(
        choices=[value for value, _ in FILE_WRITERS],
        allow_null=True,
        required=False,
        default=None,
        help_text="A change by `file` (one an imported file told of): who that file said made it. On "
        "import every change of the file is installed as the file's, this one's `by` kept here.",
    )
    at = serializers.DateTimeField()

    def validate(self, data):
        if data["fileBy"] is not None and data["by"] != Writer.FILE:
            raise serializers.ValidationError({"fileBy": 'only a change whose "by" is "file" has one'})
        after = data["after"]
        if data["change"] == Change.DROPPED or after is None:
            return data
        if data["change"] in (Change.OPENED, Change.CLOSED):
            # What an open or a close changed: whether it is open (its text, when given, as it was).
            if not (
                isinstance(after, dict) and isinstance(after.get("open"), bool) and _texts_or_none(after)
            ):
                raise serializers.ValidationError(
                    {"after": "must say whether the memory is open (open: true or false)"}
                )
            return data
        if data["change"] == Change.UPDATED:
            # What a write changed: its description or content or both, and whether it is open.
            if not (
                isinstance(after, dict)
                and isinstance(after.get("open"), bool)
                and _texts_or_none(after)
                and ("description" in after or "content" in after)
            ):
                raise serializers.ValidationError(
                    {"after": "must be what the change wrote (its description or content) and open"}
                )
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


def _texts_or_none(after: dict) -> bool:
    """Whether an open's, a close's or a write's `after` has its
    description and content as text, where it gives them at all."""
    return all(isinstance(after.get(key), str) for key in ("description", "content") if key in after)


class RevisionFile(StrictSerializer):
    revision = serializers.IntegerField(min_value=1, max_value=NUMBER_MAX)
    createdAt = serializers.DateTimeField()
    config = AgentDefinitionSerializer()


@extend_schema_field({"type": "string", "enum": [FORMAT]})
class _FormatField(serializers.CharField):
    pass


@extend_schema_field({"type": "integer", "enum": [VERSION]})
class _VersionField(serializers.IntegerField):
    pass


NOT_AN_AGENT_FILE = (
    "This is not an agent file. An agent file is the JSON document an agent's Export (GET "
    "/agents/{name}/export, or Export agent file on its page) writes: its top level says "
    f'"format": "{FORMAT}" and "version": {VERSION}, then the agent\'s name, config, blocks and memories.'
)


def agent_file_read(document) -> dict:
    """`document` checked as an agent file: first that its top level is
    one at all (an object saying its format), so a JSON file of anything
    else is told what an agent file is rather than each field it lacks."""
    if not isinstance(document, dict) or "format" not in document:
        raise DomainError(NOT_AN_AGENT_FILE, code="invalid_agent_file")
    return valid(AgentFile(data=document), code="invalid_agent_file").validated_data


class AgentFile(StrictSerializer):
    format = _FormatField(help_text=f'Always "{FORMAT}".')
    version = _VersionField(help_text=f"Always {VERSION}.")
    name = StrictCharField(
        max_length=200, help_text="The agent's name; set another to import it under that name."
    )
    exportedAt = serializers.DateTimeField(required=False)
    config = AgentDefinitionSerializer(help_text="Its config, as `PUT /agents/{name}` takes it.")
    configHistory = RevisionFile(many=True, required=False, default=list)
    recordedFromBlock = serializers.IntegerField(
        min_value=1,
        max_value=NUMBER_MAX,
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
