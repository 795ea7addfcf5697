"""A model call's retries, made by the studio rather than the SDKs (whose
clients are built with max_retries=0), so each attempt the provider could
bill is seen, and reported for the engine to charge: `Tries` runs the
attempts, `sdk_retry` says which failures of either SDK are worth another
(their shapes are the same), `retry_delay` how long to wait first.

The policy is the SDKs' own: 408, 409, 429 and 5xx (unless the server
says `x-should-retry: false`), timeouts and dropped connections; exponential
backoff with jitter, or the wait the server asks for (Retry-After), capped.
A refusal is not billed; a timeout, or a connection dropped once the
request was sent (`base.request_sent`), is — its input."""

import email.utils
import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings

from .base import Usage, request_sent

T = TypeVar("T")

INITIAL_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 8.0
RETRY_AFTER_MAX_SECONDS = 60.0
# Each attempt's number, sent as the SDKs send it (0 on the first): the
# error of the last one says how many retries were taken.
RETRY_COUNT_HEADER = "x-stainless-retry-count"


@dataclass(frozen=True)
class Retry:
    """A failed attempt that may be tried again: whether the provider could
    bill it (it took the request), and the wait it asked for, if any."""

    billable: bool
    after: float | None = None


def retry_delay(taken: int, after: float | None = None) -> float:
    """Seconds to wait before retry number `taken` + 1: what the server
    asked for (at most RETRY_AFTER_MAX_SECONDS), else an exponential backoff
    with up to a quarter off at random."""
    if after is not None and after > 0:
        return min(after, RETRY_AFTER_MAX_SECONDS)
    backoff = min(INITIAL_RETRY_SECONDS * 2.0 ** min(taken, 32), MAX_RETRY_SECONDS)
    return backoff * (1 - 0.25 * random.random())


def retry_after(headers) -> float | None:
    """The wait a response asks for: `retry-after-ms`, else `retry-after`
    in seconds or as an HTTP date. None when it asks for none."""
    if headers is None:
        return None
    try:
        return float(headers.get("retry-after-ms")) / 1000
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    try:
        return float(value)
    except (TypeError, ValueError):
        pass
    when = email.utils.parsedate_tz(value) if isinstance(value, str) else None
    return None if when is None else float(email.utils.mktime_tz(when) - time.time())


def sdk_retry(error: BaseException, *, status_error: type, connection_error: type) -> Retry | None:
    """How an SDK's failed request (OpenAI's and Anthropic's SDKs share
    their shapes: pass their APIStatusError and APIConnectionError, a
    timeout being one of the latter) may be retried; None: not at all."""
    if isinstance(error, status_error):
        response = error.response
        said = response.headers.get("x-should-retry")
        status = response.status_code
        if said == "false" or (said != "true" and status not in (408, 409, 429) and status < 500):
            return None
        return Retry(billable=False, after=retry_after(response.headers))  # refused: not billed
    if isinstance(error, connection_error):
        return Retry(billable=request_sent(error))
    return None


def backoff_wait(abandoned: threading.Event, seconds: float) -> bool:
    """Wait `seconds` before a retry; True when the call was abandoned in
    the meantime (the tests make this instant)."""
    return abandoned.wait(seconds)


class Tries:
    """One model call's attempts: `run(attempt, retry_of)` makes the
    request again while `retry_of` says it may (STUDIO["MODEL_MAX_RETRIES"]
    times at most, `retries`), and keeps in `failed` what each failed
    attempt the provider could bill is billed (`billed`: the input sent).
    An abandoned call (`abandoned` set: `call_cancellable` does it) is not
    tried again; nor is a billed attempt when `within` (given what the
    failed attempts would then bill) says the call's payer cannot cover
    them and another attempt (`ModelRequest.retry_within`)."""

    def __init__(
        self,
        *,
        billed: Usage,
        retries: int | None = None,
        within: Callable[[list[Usage]], bool] | None = None,
    ):
        self.billed = billed
        self.retries = settings.STUDIO["MODEL_MAX_RETRIES"] if retries is None else retries
        self.within = within
        self.failed: list[Usage] = []
        self.abandoned = threading.Event()

    def run(self, attempt: Callable[[int], T], retry_of: Callable[[BaseException], Retry | None]) -> T:
        """`attempt(taken)` (taken: the retries before it) until it returns,
        or raises what `retry_of` will not retry, or retries run out."""
        for taken in itertools.count():
            try:
                return attempt(taken)
            except Exception as error:
                retry = retry_of(error)
                if retry is None or taken >= self.retries or self.abandoned.is_set():
                    raise
                if retry.billable and self.within and not self.within([*self.failed, self.billed]):
                    raise  # another attempt could cost more than its payer holds
                if backoff_wait(self.abandoned, retry_delay(taken, retry.after)) or self.abandoned.is_set():
                    raise  # its turn stopped waiting: this attempt is the call's end
                if retry.billable:
                    self.failed.append(self.billed)
