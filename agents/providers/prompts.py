"""What every real provider tells the model: the memory tools (their
descriptions teach the mechanism — the system prompt says what to use it
for), and the compactor's instructions and answer shape."""

import json
import unicodedata

from django.conf import settings

from studio.tokens import count_tokens, tokens_cut

from .base import (
    CompactionReply,
    CompactionRequest,
    OutputRefused,
    ProviderError,
    depth_check,
    json_bounded,
    output_depth,
)

# Names are kept in Unicode NFC form (memories.store.memory_name): said so
# to the model, which may write one name two ways.
NAMES_ARE_LETTERS = "Names are compared by their letters, however an accented letter is encoded."
NAME_DESCRIPTION = "The memory's name, e.g. 'quest'. " + NAMES_ARE_LETTERS

TOOL_SPECS = {
    "open_memory": {
        "description": (
            "Read one of your memories and keep it open. The result is its full content. "
            "An open memory is shown in full at the head of your context from the next "
            "checkpoint on, and is kept current as older conversation is summarized away; a "
            "closed one is listed by its description only. Open memories share a token "
            "budget: if opening this one would go over it, the result names the open "
            "memories to close first. Opening a memory that is already open just reports it."
        ),
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": NAME_DESCRIPTION}},
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "close_memory": {
        "description": (
            "Save a memory and close it — the only way anything is kept across the "
            "summaries that replace old conversation. For a new name, give a one-line "
            "description (what it holds and when to open it) and the content. For a memory "
            "you have open, give whichever fields change; it is saved and closed. A memory "
            "that is closed cannot be written: open it first, so nothing is overwritten "
            "unseen. Close memories when their scene is over to free the open budget."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "description": "A short handle, e.g. 'quest' or 'npcs'. " + NAMES_ARE_LETTERS,
                },
                "description": {
                    "type": "string",
                    "description": "One line: what the memory holds and when to open it.",
                },
                "content": {"type": "string", "description": "The whole body of the memory."},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "delete_memory": {
        "description": (
            "Delete a memory for good, to make room or drop what no longer matters. It "
            "must be open first, so nothing is deleted unseen."
        ),
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": NAME_DESCRIPTION}},
            "required": ["name"],
            "additionalProperties": False,
        },
    },
}


def tool_specs(names: list[str], game_tools=()) -> list[dict]:
    """{"name", "description", "parameters"} for each offered tool, in
    order: a memory tool's the studio's own, a game tool's from
    `game_tools` (each as a definition keeps it)."""
    games = {tool["name"]: tool for tool in game_tools}
    specs = []
    for name in names:
        if name in TOOL_SPECS:
            specs.append({"name": name, **TOOL_SPECS[name]})
        elif name in games:
            tool = games[name]
            specs.append({"name": name, "description": tool["description"], "parameters": tool["parameters"]})
    return specs


def chat_tools(names: list[str], game_tools=()) -> list[dict]:
    """The tools as an OpenAI-compatible chat-completions request sends them."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec["description"],
                "parameters": spec["parameters"],
            },
        }
        for spec in tool_specs(names, game_tools)
    ]


def messages_tools(names: list[str], game_tools=()) -> list[dict]:
    """The tools as an Anthropic messages request sends them."""
    return [
        {"name": spec["name"], "description": spec["description"], "input_schema": spec["parameters"]}
        for spec in tool_specs(names, game_tools)
    ]


# --- the compactor ---------------------------------------------------------------------

COMPACTOR_INSTRUCTIONS = """\
You maintain the long-term state of a character in a game. Older conversation is about \
to be removed from the character's context. Write what must survive it.

Answer with JSON only, in this shape:
{"summary": "<the new summary>", "memories": [{"name": "<open memory name>", "content": "<its new content>"}]}

- summary: replaces the previous summary. Keep what still matters from it, add what \
matters from the conversation being removed, in plain prose, as short as it can be \
while losing nothing the story needs.
- memories: only for open memories whose content the removed conversation changes. \
Give the whole new content. Leave out memories that need no change. Never name a \
memory that is not listed as open.
"""

COMPACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "content": {"type": "string"}},
                "required": ["name", "content"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["summary", "memories"],
    "additionalProperties": False,
}


def compaction_prompt(request: CompactionRequest) -> str:
    """The compactor's one user message: previous summary, open memories,
    and the conversation being removed, as plain text."""
    parts = []
    if request.system:
        # What the character is told to care about is what a summary keeps.
        parts += ["## The character's instructions", request.system]
    if request.summary_max_tokens:
        parts += ["## Length", f"Keep the new summary under {request.summary_max_tokens} tokens."]
    if request.max_open_tokens:
        budget = f"Keep the open memories' content under {request.max_open_tokens} tokens in all."
        parts += ["## Open memory budget", budget]
    parts += ["## Previous summary", request.previous_summary or "(none yet)"]
    parts.append("## Open memories")
    if request.open_memories:
        for memory in request.open_memories:
            parts.append(f"### {memory['name']} — {memory['description']}\n{memory['content']}")
    else:
        parts.append("(none)")
    parts.append("## Conversation being removed")
    for message in request.messages:
        parts.append(_transcript_line(message))
    return "\n\n".join(parts)


def _transcript_line(message: dict) -> str:
    if message["role"] == "tool":
        return f"[tool result {message['name']}] {message['content']}"
    calls = [
        f"[calls {c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})]"
        for c in message.get("toolCalls") or ()
    ]
    text = message.get("content") or ""
    return f"{message['role']}: " + " ".join([text, *calls]).strip()


def compaction_input_tokens(request: CompactionRequest, instructions: str = COMPACTOR_INSTRUCTIONS) -> int:
    """The tokens a compaction's call sends, counted here: its instructions
    (a provider's own, when it words them otherwise) and its one message —
    what an attempt that never reported its usage is billed."""
    return count_tokens(instructions) + count_tokens(compaction_prompt(request))


def compaction_output_tokens(request: CompactionRequest) -> int:
    """Output room for a compaction: STUDIO["COMPACTION_MAX_OUTPUT_TOKENS"],
    but never less than a summary plus a full rewrite of every open memory
    (with some JSON overhead) — an answer cut off there would fail every
    retry alike."""
    open_tokens = sum(count_tokens(m["content"]) for m in request.open_memories)
    needed = (
        settings.STUDIO["MODEL_MAX_OUTPUT_TOKENS"] + open_tokens * 5 // 4 + 32 * len(request.open_memories)
    )
    return max(settings.STUDIO["COMPACTION_MAX_OUTPUT_TOKENS"], needed)


def unfenced(content: str) -> str:
    """The answer without a Markdown code fence around it (models asked for
    plain JSON often add one)."""
    text = content.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text[3:-3]
        first, _, rest = text.partition("\n")
        if first.strip().lower() in ("", "json"):
            text = rest
    return text.strip()


def compaction_parse(raw, request: CompactionRequest, usage) -> CompactionReply:
    """Validate the compactor's answer (a JSON string or an already decoded
    object). Anything malformed is a failed compaction — retried, and the
    previous checkpoint stays in force — that still costs its `usage`. What
    is wrong is said in full: it is the model's own answer, no secret. It is
    read with the bounds of every model output (STUDIO["MAX_OUTPUT_DEPTH"]),
    however deep the model nests it."""
    try:
        if isinstance(raw, str):
            raw = json_bounded(unfenced(raw), max_depth=output_depth())
        else:
            depth_check(raw, output_depth())
    except OutputRefused as refused:
        if refused.kind == "invalid":
            said = f"the compactor's answer is not JSON ({refused.detail})"
        else:
            said = f"the compactor's answer {refused.said(plural=False)}"
        raise ProviderError(said, usage=usage, public=said) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("summary"), str):
        said = "the compactor's answer has no 'summary' string"
        raise ProviderError(said, usage=usage, public=said)
    memories = raw.get("memories", [])
    if not isinstance(memories, list):
        said = "the compactor's 'memories' is not a list"
        raise ProviderError(said, usage=usage, public=said)
    open_names = {m["name"] for m in request.open_memories}
    rewrites = {}
    for item in memories:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("content"), str)
        ):
            said = "each of the compactor's memories needs a 'name' and a 'content' string"
            raise ProviderError(said, usage=usage, public=said)
        name = unicodedata.normalize("NFC", item["name"])  # as the store keeps names
        if name in open_names:  # a name that was not open is ignored: nothing blind
            rewrites[name] = item["content"]
    summary = raw["summary"].strip()
    if request.summary_max_tokens:
        # Asked to stay under its bound, a steered compactor may not: a
        # summary past it would crowd out the history it sits beside (past
        # maxTokens, no send could be made again). Kept cut to the bound.
        summary = tokens_cut(summary, request.summary_max_tokens)
    return CompactionReply(summary=summary, rewrites=rewrites, usage=usage)
