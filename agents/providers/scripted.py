"""The `scripted` model: offline and deterministic, for the demo and tests.
It is offered only where STUDIO_ALLOW_SCRIPTED_MODEL or DJANGO_DEBUG is on
(`agents.providers`).

As a chat model: when the newest user message is a JSON object with a
`script` list, it plays the script — each `{"call": tool, "args": {...}}`
is one tool call, one per model step, in order (a call to a tool that is not
offered is skipped), and the last `{"say": "..."}` is the final reply ("ok"
when there is none). Two more steps exist for tests and benchmarks:
`{"sleep": seconds}` waits (cancellable, sleep_max_seconds() at most) before
the steps that follow it, and `{"fail": "reason"}` makes the model call
fail there. Any other message gets a short reply quoting it.

A step's arguments are read as a real model's are (`base.arguments_read`:
bounded in depth and size), and a reply is cut to the request's output
limit (`max_output_tokens`, counted with studio.tokens), so a test can
watch both bounds work.

The reply is written a word at a time (to `on_text`); a say step with a
sleep, `{"say": "...", "sleep": seconds}`, pauses that long before each
word (cancellable, sleep_max_seconds() for the whole reply at most), so a
test can watch the words arrive.

As a compactor: the summary is the previous one plus a line per folded
message, and a folded line `@memory <name>: <text>` sets an open memory's
new content to <text> (the last such line wins). For tests, a folded line
`@compactor-sleep <seconds>` makes the compaction call take that long
(sleep_max_seconds() at most) and `@compactor-fail <reason>` makes it fail.

Usage is counted with tiktoken, so costs are real numbers.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from typing import TYPE_CHECKING

from django.conf import settings

from studio.tokens import count_message_tokens, count_tokens

from .base import CompactionReply, ModelReply, ProviderError, ToolCall, Usage, arguments_read

if TYPE_CHECKING:
    from .base import CompactionRequest, Control, ModelRequest

SUMMARY_MAX_LINES = 80
LINE_MAX_CHARS = 160
WORDS = re.compile(r"\s*\S+\s*|\s+")
MEMORY_LINE = re.compile(r"^\s*@memory\s+([^:]+?)\s*:\s?(.*)$")
COMPACTOR_HOOK = re.compile(r"^\s*@compactor-(sleep|fail)\s*(.*)$")


def sleep_max_seconds() -> float:
    """Anyone who can send a message can write a sleep step: this cap
    (STUDIO_SCRIPTED_SLEEP_MAX_SECONDS, 10 s unless set) keeps one message
    from holding a turn (or a compaction) open for as long as it likes."""
    return settings.STUDIO["SCRIPTED_SLEEP_MAX_SECONDS"]


def sleep_seconds(value, hook: str) -> float:
    """How long a sleep hook waits: `value` as a number of seconds, capped
    at sleep_max_seconds(). Anything but a finite number from 0 up fails the
    model call, naming the hook."""
    seconds = math.nan
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except (ValueError, OverflowError):
            pass
    if not (math.isfinite(seconds) and seconds >= 0):
        shown = json.dumps(value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        said = f"{hook} needs a number of seconds from 0 up (it waits {sleep_max_seconds():g} s at most), not {shown}"
        raise ProviderError(said, public=said)
    return min(seconds, sleep_max_seconds())


def parse_script(content: str) -> list | None:
    """The script a message holds, or None. A message nested too deep to
    decode (the decoder recurses once per level) holds none."""
    text = content.strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict) and isinstance(data.get("script"), list):
        return [step for step in data["script"] if isinstance(step, dict)]
    return None


def _newest_user_index(messages: list[dict]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "user":
            return index
    return -1


def _latency() -> float:
    """STUDIO_SCRIPTED_LATENCY_MS: a delay on every call, for benchmarks
    that want the scripted model to behave like a slow real one."""
    return settings.STUDIO.get("SCRIPTED_LATENCY_MS", 0) / 1000


class ScriptedProvider:
    def complete(self, request: ModelRequest, control: Control) -> ModelReply:
        if _latency():
            control.sleep(_latency())
        newest = _newest_user_index(request.messages)
        content = request.messages[newest]["content"] if newest >= 0 else ""
        script = parse_script(content)
        if script is None:
            return self._reply(request, control, self._quote(content))
        done = sum(1 for m in request.messages[newest + 1 :] if m["role"] == "tool")
        return self._play(request, control, script, done)

    def _play(self, request: ModelRequest, control: Control, script: list, done: int) -> ModelReply:
        calls_seen = 0
        say: dict = {"say": "ok"}
        for step in script:
            if "call" in step:
                if step["call"] not in request.tools:
                    continue  # not offered: skipped
                if calls_seen == done:
                    arguments = arguments_read(step.get("args"))
                    # Ids are unique across the whole history, as providers' are.
                    call = ToolCall(
                        id=f"call_{uuid.uuid4().hex[:16]}", name=step["call"], arguments=arguments
                    )
                    output = count_tokens(step["call"]) + count_tokens(json.dumps(arguments))
                    return ModelReply(text=None, tool_calls=[call], usage=self._usage(request, output))
                calls_seen += 1
            elif "say" in step:
                say = step
            elif calls_seen == done and "sleep" in step:
                control.sleep(sleep_seconds(step["sleep"], "the script's sleep step"))
            elif calls_seen == done and "fail" in step:
                said = str(step["fail"]) or "the scripted model failed"
                raise ProviderError(said, public=said)
        pause = sleep_seconds(say["sleep"], "the say step's sleep") if "sleep" in say else 0
        return self._reply(request, control, str(say["say"]), pause)

    @staticmethod
    def _cut(text: str, limit: int) -> tuple[list[str], int]:
        """`text`'s words, the most of them from the start that fit in
        `limit` tokens (as a real model stops at its output limit), and
        their tokens."""
        words, tokens = WORDS.findall(text), count_tokens(text)
        if tokens <= limit:
            return words, tokens
        low, high = 0, len(words)  # words[:low] fit, words[:high] do not
        while high - low > 1:
            middle = (low + high) // 2
            if count_tokens("".join(words[:middle])) <= limit:
                low = middle
            else:
                high = middle
        return words[:low], count_tokens("".join(words[:low]))

    @staticmethod
    def _quote(content: str) -> str:
        line = " ".join(content.split())
        if len(line) > 120:
            line = line[:117] + "..."
        return f'You said: "{line}"'

    def _reply(self, request: ModelRequest, control: Control, text: str, pause: float = 0) -> ModelReply:
        """The reply, handed to `on_text` a word at a time, `pause` seconds
        before each word (the cap for them all at most)."""
        words, tokens = self._cut(text, request.output_limit())
        text = "".join(words)
        pause = min(pause, sleep_max_seconds() / max(len(words), 1))
        for word in words:
            if pause:
                control.sleep(pause)
            if request.on_text is not None:
                request.on_text(word)
        return ModelReply(text=text, usage=self._usage(request, tokens))

    @staticmethod
    def _usage(request: ModelRequest, output_tokens: int) -> Usage:
        return Usage(input_tokens=request.input_tokens, output_tokens=output_tokens)

    # --- compactor ---------------------------------------------------------------

    @staticmethod
    def _hook(match) -> None:
        if match is None:
            return
        if match.group(1) == "sleep":
            time.sleep(sleep_seconds(match.group(2) or 0, "@compactor-sleep"))
        else:
            said = match.group(2) or "the scripted compactor failed"
            raise ProviderError(said, public=said)

    def summarize(self, request: CompactionRequest) -> CompactionReply:
        if _latency():
            time.sleep(_latency())
        lines = request.previous_summary.splitlines() if request.previous_summary else []
        open_names = {m["name"] for m in request.open_memories}
        rewrites: dict[str, str] = {}
        for message in request.messages:
            text = message.get("content") or ""
            for raw in text.splitlines():
                match = MEMORY_LINE.match(raw)
                if match and match.group(1) in open_names:
                    rewrites[match.group(1)] = match.group(2)
                self._hook(COMPACTOR_HOOK.match(raw))
            if message["role"] in ("user", "assistant") and text:
                line = " ".join(text.split())
                if len(line) > LINE_MAX_CHARS:
                    line = line[: LINE_MAX_CHARS - 3] + "..."
                lines.append(f"- {message['role']}: {line}")
        lines = lines[-SUMMARY_MAX_LINES:]
        # Within its token budget: the oldest lines give way first.
        while (
            request.summary_max_tokens
            and len(lines) > 1
            and count_tokens("\n".join(lines)) > request.summary_max_tokens
        ):
            lines = lines[max(1, len(lines) // 8) :]
        summary = "\n".join(lines)
        input_tokens = (
            count_tokens(request.system)
            + count_tokens(request.previous_summary)
            + sum(count_message_tokens(m) for m in request.messages)
            + sum(count_tokens(m["content"]) for m in request.open_memories)
        )
        output_tokens = count_tokens(summary) + sum(count_tokens(t) for t in rewrites.values())
        return CompactionReply(
            summary=summary,
            rewrites=rewrites,
            usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
        )
