"""Reading what the studio logs, as its JSON handler writes it."""

import io
import json
import logging

from studio.ops.logs import ContextFilter, JsonFormatter


def json_lines_logged(level: int):
    """Lines logged at `level` and up while it runs, as the JSON handler
    writes them, parsed (a generator for a fixture)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    kept = root.level
    root.addHandler(handler)
    root.setLevel(level)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)
    root.setLevel(kept)
