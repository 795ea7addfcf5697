"""The API's request bodies, checked: an agent's definition (also the
`config` of an agent file), a send, a fork, a replay."""

from django.core.validators import RegexValidator
from rest_framework import serializers

from agents import game_tools, services
from agents.models import NUMBER_MAX, CompactionType
from agents.replays import REPLAY_MAX_BLOCKS
from agents.services import NAME_PATTERN
from studio.http.api_fields import (
    ChoiceField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
)


class MemoryConfigSerializer(StrictSerializer):
    maxOpenTokens = StrictIntegerField(
        min_value=1, max_value=10_000_000, default=services.DEFAULT_MAX_OPEN_TOKENS
    )


class CompactionConfigSerializer(StrictSerializer):
    type = ChoiceField(choices=CompactionType.values, default=CompactionType.SUMMARIZE)
    maxTokens = StrictIntegerField(min_value=256, max_value=10_000_000, default=services.DEFAULT_MAX_TOKENS)


class GameToolSerializer(StrictSerializer):
    name = StrictCharField(
        max_length=64,
        validators=[
            RegexValidator(r"^[A-Za-z0-9_-]{1,64}$", "use 1–64 characters from A–Z, a–z, 0–9, '_' and '-'")
        ],
        help_text="What the model calls it, e.g. `give_item`; never a memory tool's name.",
    )
    description = StrictCharField(
        max_length=game_tools.DESCRIPTION_MAX_CHARS,
        help_text="What it does and when to call it: the model reads it.",
    )
    parameters = serializers.JSONField(
        required=False,
        help_text='Its arguments, as a JSON Schema of an object (`{"type": "object", "properties": {…}}`), '
        "as both providers take it. Absent: no arguments.",
    )
    timeoutSeconds = StrictIntegerField(
        required=False,
        min_value=1,
        max_value=1_000_000,
        help_text="How long the game has to answer a call (default STUDIO_TOOL_TIMEOUT_SECONDS, 60; at most "
        "STUDIO_MAX_TOOL_TIMEOUT_SECONDS): past it the model is told the game did not answer.",
    )


class AgentDefinitionSerializer(StrictSerializer):
    systemPrompt = StrictCharField(allow_blank=True, default="", trim_whitespace=False, max_length=200_000)
    model = StrictCharField(
        required=False,
        max_length=200,
        help_text="`scripted`, `openai:<model>` or `anthropic:<model>`. Absent: the game's default "
        "model (`GET /game`), else the studio's; refused (400 `invalid_definition`) when there is "
        "none. A redefinition without it takes the default as it is then.",
    )
    memory = MemoryConfigSerializer(
        required=False,
        allow_null=True,
        help_text="Present (even `{}`): the agent has memory, with `maxOpenTokens` (default 4000) "
        "its open budget. Absent or null: memory off.",
    )
    compaction = CompactionConfigSerializer(
        required=False,
        help_text="`type` `summarize` (default) or `sliding-window`; `maxTokens` (default 32000) the "
        "context size it keeps below. `maxOpenTokens` must be below `maxTokens` / 2.",
    )
    tools = GameToolSerializer(
        many=True,
        required=False,
        help_text="Tools the game runs, which the model may call on a normal send: the turn waits for the "
        "game's answer (`tool.requested`, then `POST …/turns/{id}/tool-results`). At most "
        "STUDIO_MAX_GAME_TOOLS (32), names unique. Absent: none.",
    )

    def definition(self) -> services.AgentDefinition:
        return services.definition_from_config(self.validated_data)


class SendSerializer(StrictSerializer):
    # Its length is the engine's rule (413 past CONTENT_MAX_CHARS).
    content = StrictCharField(trim_whitespace=False)
    transient = StrictBooleanField(default=False)
    wait = StrictBooleanField(
        default=True,
        help_text=(
            "false: answer 202 at once with the turn (`queued` or `running`) and a `Location` to "
            "read it at; the send runs on without the client."
        ),
    )
    stream = StrictBooleanField(
        default=False,
        help_text=(
            "true (or `Accept: text/event-stream`): answer 200 `text/event-stream` with the turn's "
            "events — `turn.started`, `tool_call`, `memory.changed`, `reply.delta` — and last "
            "`turn.finished`, whose `turn` is the turn a send answers. The turn runs on if the client "
            "goes, or if the key is revoked meanwhile (the stream then ends with an `error` event). "
            "429 `too_many_streams`, before the turn starts, when the game has "
            "STUDIO_MAX_STREAMS_PER_GAME streams open."
        ),
    )


class ToolResultSerializer(StrictSerializer):
    callId = StrictCharField(
        max_length=200, help_text="The call's id, as `tool.requested` and `pendingToolCalls` give it."
    )
    result = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="What the tool gave: text, or any JSON value (the model reads its JSON). Either this or `error`.",
    )
    error = StrictCharField(
        required=False, trim_whitespace=False, help_text="Why the tool failed: a sentence the model reads."
    )


class ForkSerializer(StrictSerializer):
    name = StrictCharField(
        max_length=64,
        validators=[RegexValidator(NAME_PATTERN, "use 1–64 characters from A–Z, a–z, 0–9, '_' and '-'")],
        help_text="The new agent's name.",
    )
    atBlock = serializers.IntegerField(min_value=1, max_value=NUMBER_MAX)


class DefinitionChangesSerializer(AgentDefinitionSerializer):
    """A definition's keys, each optional: one given replaces that part of
    the agent's config as a definition (PUT) would set it."""

    systemPrompt = StrictCharField(
        required=False, allow_blank=True, trim_whitespace=False, max_length=200_000
    )
    model = StrictCharField(
        required=False, max_length=200, help_text="`scripted`, `openai:<model>` or `anthropic:<model>`."
    )


class ReplaySerializer(StrictSerializer):
    fromBlock = serializers.IntegerField(
        min_value=1, max_value=NUMBER_MAX, help_text="The first block whose player's message is played again."
    )
    through = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=NUMBER_MAX,
        help_text="The last block played again; absent, the agent's newest ended block. At most "
        f"{REPLAY_MAX_BLOCKS} blocks from fromBlock.",
    )
    definition = DefinitionChangesSerializer(
        required=False,
        help_text="The changes to the agent's definition (its config as it is now): any of systemPrompt, "
        "model, memory, compaction. Checked as a definition is. Absent or {}: none — the replay then "
        "checks that the play is reproduced.",
    )
