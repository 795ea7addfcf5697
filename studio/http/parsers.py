"""Reading JSON that people send: the API's bodies and the pages' uploads.

Nothing the studio reads is nested anywhere near JSON_MAX_DEPTH levels, nor
holds an object of anywhere near JSON_MAX_KEYS keys. Deeper documents are
only good for exhausting the stack of whatever walks them next (Python's
decoder itself gives up near its recursion limit, with RecursionError), and
wider objects for making a refusal cost what their every key costs to name.
So a document past either bound is refused as it is read, the same way on
every route, before anything looks at what it says.
"""

import gc
import json
from itertools import chain, compress, repeat
from operator import is_

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

JSON_MAX_DEPTH = 100
JSON_MAX_KEYS = 1_000
TOO_DEEP = f"the document is nested more than {JSON_MAX_DEPTH} levels deep."
TOO_WIDE = f"the document holds an object of more than {JSON_MAX_KEYS:,} keys."
_CONTAINERS = frozenset((dict, list))


class JSONBeyondBounds(ValueError):
    """A document the studio does not read: its sentence says which bound it passes."""


def json_bounds_check(value) -> None:
    """Raise JSONBeyondBounds when `value` (parsed JSON) nests lists and
    objects more than JSON_MAX_DEPTH levels deep, or holds an object of more
    than JSON_MAX_KEYS keys. Walks a level at a time, shallowest first, each
    level's objects measured before their values are looked at; within a
    level the interpreter's own iterators pick the containers out, so a
    document's scalars and empty containers cost no step of Python each."""
    # Speed: a step of Python per value a body holds; guarded by bench/big_bodies.py (the bounds' check alone).
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > JSON_MAX_DEPTH:
            raise JSONBeyondBounds(TOO_DEEP)
        kinds = list(map(type, level))
        objects = list(compress(level, map(is_, kinds, repeat(dict))))
        if objects and max(map(len, objects)) > JSON_MAX_KEYS:
            raise JSONBeyondBounds(TOO_WIDE)
        arrays = compress(level, map(is_, kinds, repeat(list)))
        items = list(chain(chain.from_iterable(arrays), chain.from_iterable(map(dict.values, objects))))
        level = list(compress(items, map(_CONTAINERS.__contains__, map(type, items))))


def _collector_paused(decode, *args):
    """`decode(*args)` with the garbage collector paused (unless something
    else has paused it). Decoding a document makes all its lists and
    objects at once, none of them in a cycle (and the bounds' check a view
    of each object); left on, the collector walks them all again at each
    pass their own making sets off. The pause is the whole process's, for
    as long as the read takes (well under a second for the largest body a
    request may send); what other threads make meanwhile is collected at
    the first pass after it."""
    # Speed: the collector's passes over a document as it is made; guarded by bench/big_bodies.py (CPU to read a body).
    if not gc.isenabled():
        return decode(*args)
    gc.disable()
    try:
        return decode(*args)
    finally:
        gc.enable()


def json_read(raw: bytes | str):
    """`json.loads(raw)`, refusing a document past the bounds with
    JSONBeyondBounds (a ValueError, like any other unreadable document)."""
    return _collector_paused(_json_read, raw)


def _json_read(raw: bytes | str):
    try:
        value = json.loads(raw)
    except RecursionError:
        raise JSONBeyondBounds(TOO_DEEP) from None
    if isinstance(value, (dict, list)):
        json_bounds_check(value)
    return value


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, refusing documents past the bounds with the same
    400 as any JSON it cannot read."""

    def parse(self, stream, media_type=None, parser_context=None):
        return _collector_paused(self._parse, stream, media_type, parser_context)

    def _parse(self, stream, media_type, parser_context):
        try:
            value = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - {TOO_DEEP}") from None
        if isinstance(value, (dict, list)):
            try:
                json_bounds_check(value)
            except JSONBeyondBounds as beyond:
                raise ParseError(f"JSON parse error - {beyond}") from None
        return value
