"""Reading JSON that people send: the API's bodies and the pages' uploads.

Nothing the studio reads is nested anywhere near JSON_MAX_DEPTH levels, and
deeper documents are only good for exhausting the stack of whatever walks
them next (Python's decoder itself gives up near its recursion limit, with
RecursionError). So a document nested deeper is refused as it is read, the
same way on every route.
"""

import json

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

JSON_MAX_DEPTH = 100
TOO_DEEP = f"the document is nested more than {JSON_MAX_DEPTH} levels deep."


class JSONTooDeep(ValueError):
    def __init__(self):
        super().__init__(TOO_DEEP)


def json_depth_check(value) -> None:
    """Raise JSONTooDeep when `value` (parsed JSON) nests lists and objects
    more than JSON_MAX_DEPTH levels deep. Walks without recursing."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > JSON_MAX_DEPTH:
            raise JSONTooDeep()
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def json_read(raw: bytes | str):
    """`json.loads(raw)`, refusing a document nested too deeply with
    JSONTooDeep (a ValueError, like any other unreadable document)."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise JSONTooDeep() from None
    if isinstance(value, (dict, list)):
        json_depth_check(value)
    return value


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, refusing documents nested too deeply with the
    same 400 as any JSON it cannot read."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            value = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - {TOO_DEEP}") from None
        if isinstance(value, (dict, list)):
            try:
                json_depth_check(value)
            except JSONTooDeep:
                raise ParseError(f"JSON parse error - {TOO_DEEP}") from None
        return value
