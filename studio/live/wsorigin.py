"""WebSocket origin check.

A browser always sends `Origin`; it must be this site's own origin — its
scheme, host and port, the very rule Django's CSRF check holds a page's
POST to — or a page elsewhere (another site, or another port of this host)
could ride a signed-in user's session. This site's origin is the scheme the
browser used (https behind the TLS proxy, by SECURE_PROXY_SSL_HEADER, or
over wss) with the Host it connected to, that Host being one ALLOWED_HOSTS
names; or one of CSRF_TRUSTED_ORIGINS (the public address, when the proxy
forwards another Host). Game code connecting with an API key (no browser, no
Origin header) is let through: its key is its credential.
"""

from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.utils.http import is_same_domain


class BrowserOriginValidator:
    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            origin = dict(scope.get("headers") or []).get(b"origin")
            if origin is not None and not origin_allowed(origin.decode("latin-1"), _Handshake(scope)):
                return await _deny(receive, send)
        return await self.application(scope, receive, send)


async def _deny(receive, send) -> None:
    """Refuse the handshake (403). Not a consumer: one would take a
    channel on the channel layer, and listen on it, for a socket it refuses."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close"})


class _Handshake(HttpRequest):
    """A WebSocket's opening request as Django reads a request: its headers
    in META, so `get_host()` and `is_secure()` say what they say of a page's."""

    def __init__(self, scope):
        super().__init__()
        for name, value in scope.get("headers") or []:
            self.META["HTTP_" + name.decode("latin-1").upper().replace("-", "_")] = value.decode("latin-1")
        self.ws_scheme = scope.get("scheme", "ws")

    def _get_scheme(self):
        return "https" if self.ws_scheme == "wss" else "http"


def origin_allowed(origin: str, request: HttpRequest) -> bool:
    """Whether a page at `origin` may open a socket with `request` (the
    handshake): as Django's CSRF check decides it of a POST."""
    try:
        own = f"{request.scheme}://{request.get_host()}"
    except (DisallowedHost, KeyError):  # a Host not served here, or none
        own = None
    if origin == own or origin in {
        trusted for trusted in settings.CSRF_TRUSTED_ORIGINS if "*" not in trusted
    }:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    return any(
        is_same_domain(parsed.netloc, trusted.netloc.lstrip("*"))
        for trusted in (urlsplit(t) for t in settings.CSRF_TRUSTED_ORIGINS if "*" in t)
        if trusted.scheme == parsed.scheme
    )
