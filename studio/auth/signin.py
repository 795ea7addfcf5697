"""Who may try a password. Failed sign-ins are limited first per username
*and* client address (STUDIO_SIGNIN_FAILURES_PER_USERNAME_AND_ADDRESS, 5),
which shuts one address out of one account quickly; per address, whatever
the usernames (_PER_ADDRESS, 20); and only then per username from every
address together (_PER_USERNAME, 100), in STUDIO_SIGNIN_WINDOW_SECONDS (900).

So nobody can lock an account from one address: past its five failures an
address is refused for that username alone, and the username is refused to
everyone only after failures from many addresses (twenty at the least with
the defaults) — a guessing attack spread over a botnet, which that last
limit bounds to a hundred guesses per account per window.

An attempt takes its place in every window before the password is checked
(studio/auth/throttles.py: one atomic step in Redis per window, and an attempt
refused by one window is given back by those it was counted in), so
attempts made at once cannot pass a limit between them; past one the
sign-in form answers 429 with Retry-After and checks nothing. A successful
sign-in gives its places back and clears the failures of its username from
its address, so only failures stay counted.

A username is counted as Django authenticates it (`signin_username`):
every spelling that signs in to one account counts against that account.

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
from django.contrib.auth.forms import UsernameField
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpResponse

from studio.auth.throttles import window_clear, window_give_back, window_take


@dataclass(frozen=True)
class SigninWindows:
    pair: str
    address: str
    username: str

    def limited(self) -> list[tuple[str, str]]:
        """Each window with the setting that limits it, the narrowest first."""
        return [
            (self.pair, "SIGNIN_FAILURES_PER_USERNAME_AND_ADDRESS"),
            (self.address, "SIGNIN_FAILURES_PER_ADDRESS"),
            (self.username, "SIGNIN_FAILURES_PER_USERNAME"),
        ]


@dataclass(frozen=True)
class SigninAttempt:
    windows: SigninWindows
    member: str
    # None: let through to the password check; else seconds to wait.
    wait: float | None


def signin_username(username: str) -> str:
    """`username` as the throttle counts it: as Django's sign-in forms read
    it before authenticating (UsernameField: stripped, then NFKC — 'ｍａｒａ'
    signs in as 'mara'), so no spelling of an account escapes its limits;
    then case-folded, so 'Mara' and 'mara' count together too (coarser than
    Django's match, never finer)."""
    return UsernameField().to_python(username).casefold()


def _windows(*, username: str = "", address: str = "") -> SigninWindows:
    """The windows of a username (hashed: any text fits a key), of an
    address, and of the two together."""
    digest = hashlib.sha256(signin_username(username).encode()).hexdigest()[:32]
    prefix = f"{settings.CHANNEL_PREFIX}:signin"
    return SigninWindows(
        pair=f"{prefix}:pair:{digest}:{address}",
        address=f"{prefix}:address:{address}",
        username=f"{prefix}:username:{digest}",
    )


def signin_attempt_start(*, username: str, address: str) -> SigninAttempt:
    """Count a sign-in attempt for `username` from `address` against every
    limit, or find it refused (its `wait` set) and counted nowhere."""
    windows = _windows(username=username, address=address)
    member, seconds = uuid.uuid4().hex, settings.STUDIO["SIGNIN_WINDOW_SECONDS"]
    counted = []
    for window, limit in windows.limited():
        wait = window_take(window, limit=settings.STUDIO[limit], seconds=seconds, member=member)
        if wait is not None:
            for taken in counted:
                window_give_back(taken, member, seconds=seconds)
            return SigninAttempt(windows, member, wait)
        counted.append(window)
    return SigninAttempt(windows, member, None)


def signin_attempt_succeeded(attempt: SigninAttempt) -> None:
    # The username's window keeps the failures from elsewhere: a sign-in
    # of the account's owner does not make room for a guesser.
    window_clear(attempt.windows.pair)
    for window in (attempt.windows.address, attempt.windows.username):
        window_give_back(window, attempt.member, seconds=settings.STUDIO["SIGNIN_WINDOW_SECONDS"])


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


@receiver(user_logged_in, dispatch_uid="studio.auth.signin.succeeded")
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
