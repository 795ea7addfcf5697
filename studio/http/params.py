"""What a URL carries, read in the one form the studio writes it.

Python reads far more than the studio writes: `int('١٢')` is 12 (any
script's digits, '1_0', ' 7 '), `'³'.isdigit()` is True while `int('³')`
raises, and `uuid.UUID` takes braces, `urn:uuid:`, bare hex and other
scripts' digits. So a whole number or a UUID in a path or a query string
is read here, in ASCII and the studio's own spelling, and anything else is
not one: a path parameter in another form names nothing (404), a query
parameter is refused (400).
"""

import re
import uuid

WHOLE_NUMBER = re.compile(r"[0-9]+")
INTEGER = re.compile(r"-?[0-9]+")
# As the studio writes every id (`str(uuid)`), and as Django's <uuid:> route converter reads one.
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def whole_number(text: str, *, max_digits: int) -> int | None:
    """`text` as a whole number written in at most `max_digits` ASCII digits, or None."""
    if len(text) > max_digits or not WHOLE_NUMBER.fullmatch(text):
        return None
    return int(text)


def uuid_of(text: str) -> uuid.UUID | None:
    """`text` as a UUID written as the studio writes one, or None."""
    return uuid.UUID(text) if UUID.fullmatch(text) else None
