"""What a log line knows of where it was written: the HTTP request it
belongs to (or that queued the Celery task writing it), and the game,
agent, turn or compaction being worked on.

Both are context variables, so a line carries them whatever logger wrote
it (Django's, a library's, ours) — `ContextFilter` copies them onto every
record, and `JsonFormatter` writes one JSON object per line with them
(`STUDIO_LOG_FORMAT=json`). Under ASGI each request runs in a context of
its own, so a value set while one request runs is never seen by another.
"""

import json
import logging
import re
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

# An incoming X-Request-ID is kept when it is 1–200 visible ASCII
# characters: anything else (spaces, control characters, other scripts)
# could forge or break a log line, so the request gets an id of its own.
REQUEST_ID_PATTERN = re.compile(r"[\x21-\x7e]{1,200}")

_request_id: ContextVar[str | None] = ContextVar("studio_request_id", default=None)
# (game, agent, turn, compaction)
_work: ContextVar[tuple] = ContextVar("studio_work", default=(None, None, None, None))


def request_id_choose(header: str | None) -> str:
    """The request's id: the client's X-Request-ID when it is a sane value,
    else a new one."""
    if header and REQUEST_ID_PATTERN.fullmatch(header):
        return header
    return uuid.uuid4().hex


def request_id_set(request_id: str | None) -> None:
    """Every line logged from here on in this context carries `request_id`.
    Not reset when the view returns: Django logs a request's 4xx and 5xx
    after its middleware have run; the next request sets its own."""
    _request_id.set(request_id)


def request_id() -> str | None:
    return _request_id.get()


@contextmanager
def request_context(request_id: str | None):
    """Lines logged inside (and tasks sent) carry `request_id` — the id of
    the request that asked for work now done on its behalf elsewhere or
    later (a compaction the sweep hands out again); the current one when
    it is empty."""
    token = _request_id.set(request_id or _request_id.get())
    try:
        yield
    finally:
        _request_id.reset(token)


@contextmanager
def work_context(*, game=None, agent=None, turn=None, compaction=None):
    """Lines logged inside carry these game, agent, turn and compaction ids."""
    token = _work.set((game, agent, turn, compaction))
    try:
        yield
    finally:
        _work.reset(token)


CONTEXT_FIELDS = ("request_id", "game", "agent", "turn", "compaction")


class ContextFilter(logging.Filter):
    """Puts the request id and the game, agent, turn and compaction ids
    (None where unknown) on every record, for any formatter to use."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get()
        record.game, record.agent, record.turn, record.compaction = _work.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger,
    message, the record's own fields (`extra={"fields": {…}}`: the access
    log's), the context ids that are known, and the exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in (getattr(record, "fields", None) or {}).items():
            line.setdefault(name, value)
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


def handlers_format_as_json(logger: logging.Logger) -> None:
    """Make `logger`'s handlers write JSON lines with the context ids (for
    handlers set up by someone else: Celery's worker)."""
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter())
        handler.addFilter(ContextFilter())


def carry_log_context(fn):
    """`fn`, to be run in another thread, logging under the request id and
    work ids of where it is made. Only those: in a copy of the whole context
    the thread could find this one's database connection (asgiref's Local
    keeps Django's there)."""
    request_id, work = _request_id.get(), _work.get()

    def run(*args, **kwargs):
        # A pool's thread keeps its context from task to task: set both.
        _request_id.set(request_id)
        _work.set(work)
        return fn(*args, **kwargs)

    return run
