"""One shape for every list the API answers.

In: `limit` (how many items, 1 to MAX_LIMIT) and `cursor` (where the last
page ended, as its `nextCursor` gave it). Out: the items under the list's
name, and `nextCursor`, null on the last page.

A cursor is the last item's ordering key (a keyset), not an offset: items
added or removed between two requests never make a walk skip or repeat one.
It is opaque to clients and names its list, so one list's cursor is refused
by another.
"""

import base64
import json
from dataclasses import dataclass

from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from studio.http.schema import errors

MAX_LIMIT = 1000
NEXT_CURSOR_HELP = "Pass as `cursor` for the next page; null on the last page."


@dataclass(frozen=True)
class Keyset:
    """How a list is ordered and paged. `name` is the key of its items in
    the answer; `order` a field unique within the list, with "-" first for
    newest first; `default_limit` the page size the list answered with
    before it took a `limit`, so a client that does not page sees what it
    saw."""

    name: str
    order: str
    default_limit: int
    key_type: type = int

    @property
    def field(self) -> str:
        return self.order.lstrip("-")

    def page(self, rows, *, after, limit: int, wire) -> "Page":
        """Up to `limit` of `rows` (a queryset) after the position `after`
        (None: from the start), read in one query and shown by `wire` (rows
        → wire shapes)."""
        if after is not None:
            direction = "lt" if self.order.startswith("-") else "gt"
            rows = rows.filter(**{f"{self.field}__{direction}": after})
        found = list(rows.order_by(self.order)[: limit + 1])
        next_key = getattr(found[limit - 1], self.field) if len(found) > limit else None
        return Page(items=wire(found[:limit]), next_key=next_key, keyset=self)

    def cursor(self, key) -> str:
        text = json.dumps([self.name, key], separators=(",", ":"))
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    def key(self, cursor: str):
        """The position a cursor of this list stands for."""
        try:
            value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        except ValueError:
            value = None
        if not (
            isinstance(value, list) and len(value) == 2 and value[0] == self.name and self._sane(value[1])
        ):
            raise serializers.ValidationError(
                "is not a cursor of this list: pass the `nextCursor` it answered."
            )
        return value[1]

    def _sane(self, key) -> bool:
        # What the database can compare without an error: a bigint, or
        # printable text (no NUL, no lone surrogate).
        if self.key_type is int:
            return type(key) is int and 0 <= key < 2**63
        return isinstance(key, str) and 0 < len(key) <= 200 and key.isprintable()

    def query(self) -> type[serializers.Serializer]:
        """The query-string serializer of the list: `limit` and `cursor`,
        validated into `limit` and `after` (the position, or None), the
        arguments of `page`. A list with filters subclasses it; one that
        paged with a parameter of its own before (history's `after`) names
        it `cursor_alias`, and takes either."""
        keyset = self

        class ListQuery(serializers.Serializer):
            cursor_alias = None
            limit = serializers.IntegerField(
                min_value=1,
                max_value=MAX_LIMIT,
                default=keyset.default_limit,
                help_text="How many items to answer with.",
            )
            cursor = serializers.CharField(
                required=False, max_length=500, help_text="The `nextCursor` of the page before."
            )

            def validate_cursor(self, text):
                return keyset.key(text)

            def validate(self, data):
                alias = self.cursor_alias
                if alias in data and "cursor" in data:
                    raise serializers.ValidationError({alias: "cannot be given with `cursor`: pass one."})
                after = data.pop("cursor") if "cursor" in data else data.pop(alias, None)
                return {**data, "after": after}

        return ListQuery


@dataclass(frozen=True)
class Page:
    items: list  # wire shapes
    next_key: object  # the last item's key when there are more; None on the last page
    keyset: Keyset

    def body(self) -> dict:
        """The answer: the items under the list's name, and `nextCursor`."""
        next_cursor = None if self.next_key is None else self.keyset.cursor(self.next_key)
        return {self.keyset.name: self.items, "nextCursor": next_cursor}


def each(wire):
    """A page's `wire` made of the wire shape of one item."""
    return lambda rows: [wire(row) for row in rows]


def list_out(name: str, key: str, item, **fields) -> type[serializers.Serializer]:
    """The schema of a list's answer: `item`s under `key`, `nextCursor`, and
    any other `fields` it has."""
    attrs = {
        key: item(many=True),
        "nextCursor": serializers.CharField(allow_null=True, help_text=NEXT_CURSOR_HELP),
    }
    return type(name, (serializers.Serializer,), {**attrs, **fields})


def list_schema(operation_id: str, query, answer, summary: str, *statuses: int):
    """`extend_schema` for a list's GET: its `query` parameters, its
    `answer`, and the 400 of a bad limit, cursor or filter."""
    return extend_schema(
        operation_id=operation_id,
        parameters=[query],
        responses={200: answer, **errors(400, *statuses)},
        summary=summary,
    )
