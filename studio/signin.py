"""Who may try a password: failed sign-ins are limited per username and per
client address (STUDIO_SIGNIN_FAILURES_PER_USERNAME, 5, and
_PER_ADDRESS, 20, in STUDIO_SIGNIN_WINDOW_SECONDS, 900).

An attempt takes its place in both windows before the password is checked
(studio/throttles.py: one atomic step in Redis), so attempts made at once
cannot pass the limit between them; past it the sign-in form answers 429
with Retry-After and checks nothing. A successful sign-in gives its place
back and clears the username's failures, so only failures stay counted.

Behind the proxy (DJANGO_SECURE_PROXY) a client's address is the last one
in X-Forwarded-For, the one the proxy appended; the entries before it came
from the client and could be anything.
"""

import functools
import hashlib
import math
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpResponse

from .throttles import window_clear, window_give_back, window_take


@dataclass(frozen=True)
class SigninAttempt:
    username_window: str
    address_window: str
    member: str
    # None: let through to the password check; else seconds to wait.
    wait: float | None


def _windows(*, username: str = "", address: str = "") -> tuple[str, str]:
    """The windows of a username (hashed: any text fits a key) and an address."""
    digest = hashlib.sha256(username.strip().casefold().encode()).hexdigest()[:32]
    prefix = f"{settings.CHANNEL_PREFIX}:signin"
    return f"{prefix}:username:{digest}", f"{prefix}:address:{address}"


def _conf(name: str) -> int:
    return settings.STUDIO[name]


def signin_attempt_start(*, username: str, address: str) -> SigninAttempt:
    """Count a sign-in attempt for `username` from `address` against both
    limits, or find it refused (its `wait` set) and counted nowhere."""
    username_window, address_window = _windows(username=username, address=address)
    member, seconds = uuid.uuid4().hex, _conf("SIGNIN_WINDOW_SECONDS")
    wait = window_take(
        username_window, limit=_conf("SIGNIN_FAILURES_PER_USERNAME"), seconds=seconds, member=member
    )
    if wait is None:
        wait = window_take(
            address_window, limit=_conf("SIGNIN_FAILURES_PER_ADDRESS"), seconds=seconds, member=member
        )
        if wait is not None:
            window_give_back(username_window, member, seconds=seconds)
    return SigninAttempt(username_window, address_window, member, wait)


def signin_attempt_succeeded(attempt: SigninAttempt) -> None:
    window_clear(attempt.username_window)
    window_give_back(attempt.address_window, attempt.member, seconds=_conf("SIGNIN_WINDOW_SECONDS"))


def signin_windows_clear(*, username: str | None = None, address: str | None = None) -> None:
    """Forget the failures of a username and of an address."""
    username_window, address_window = _windows(username=username or "", address=address or "")
    if username is not None:
        window_clear(username_window)
    if address is not None:
        window_clear(address_window)


def client_address(request) -> str:
    if settings.SECURE_PROXY:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")[-1].strip()
        if forwarded:
            return forwarded
    return request.META.get("REMOTE_ADDR", "")


# --- the sign-in views ---------------------------------------------------------------


def signin_throttled(view):
    """`view`, a sign-in form's view (the studio's, the admin's), with each
    POST counted as an attempt, refused with 429 past the limits."""

    @functools.wraps(view)
    def throttled(request, *args, **kwargs):
        if request.method != "POST":
            return view(request, *args, **kwargs)
        attempt = signin_attempt_start(
            username=request.POST.get("username", ""), address=client_address(request)
        )
        if attempt.wait is not None:
            return _too_many_attempts(attempt.wait)
        request.signin_attempt = attempt
        return view(request, *args, **kwargs)

    return throttled


@receiver(user_logged_in, dispatch_uid="studio.signin.succeeded")
def _signed_in(sender, request, user, **kwargs):
    """Django signed the user in: the attempt of this request succeeded."""
    attempt = getattr(request, "signin_attempt", None)
    if attempt is not None:
        signin_attempt_succeeded(attempt)


def _too_many_attempts(wait: float) -> HttpResponse:
    minutes = math.ceil(wait / 60)
    sentence = (
        "Too many failed sign-ins for this username or from this address; "
        f"try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )
    response = HttpResponse(sentence, status=429, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(math.ceil(wait))
    return response
