"""Text the database can store.

PostgreSQL's text and jsonb refuse NUL, and a lone surrogate has no UTF-8
encoding at all. A model may send either (in its reply, a tool call's
arguments, a summary), and a player's message must not: what comes from a
model is made storable by replacing them with U+FFFD, the replacement
character; what comes from a person is refused (`unstorable_reason`).
"""

import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    """`text` with every character the database refuses replaced. A str
    subclass keeps its class (a tool call's unparsed arguments stay so)."""
    if not _UNSTORABLE.search(text):
        return text
    return type(text)(_UNSTORABLE.sub(REPLACEMENT, text))


def storable_json(value):
    """A JSON value with `storable` applied to every string in it, keys too."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable_json(k): storable_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable_json(v) for v in value]
    return value


def unstorable_reason(text: str) -> str | None:
    """Why the database cannot keep `text` as it is, or None."""
    match = _UNSTORABLE.search(text)
    if match is None:
        return None
    if match.group() == "\x00":
        return "it contains a NUL character (U+0000)"
    return "it contains a lone surrogate (an unpaired UTF-16 half), which is not valid Unicode text"


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in `text`, or None. ASCII text holds none,
    and is not searched."""
    found = None if text.isascii() else _SURROGATE.search(text)
    return None if found is None else found.group()
