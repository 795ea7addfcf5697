"""Forgetting sign-in failures between tests."""

from studio.auth.signin import _windows
from studio.auth.throttles import window_clear


def signin_windows_clear(*, username: str | None = None, address: str | None = None) -> None:
    """Forget the failures of a username, of an address, and (both given)
    of the username from the address."""
    windows = _windows(username=username or "", address=address or "")
    if username is not None:
        window_clear(windows.username)
    if address is not None:
        window_clear(windows.address)
    if username is not None and address is not None:
        window_clear(windows.pair)
