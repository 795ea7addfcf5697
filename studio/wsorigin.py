"""WebSocket origin check.

A browser always sends `Origin`; it must be one of this site's hosts, or a
page elsewhere could ride a signed-in user's session. Game code connecting
with an API key (no browser, no Origin header) is let through: its key is
its credential.
"""

from urllib.parse import urlparse

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import is_same_domain


class BrowserOriginValidator:
    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            origin = dict(scope.get("headers") or []).get(b"origin")
            if origin is not None and not self._allowed(origin.decode("latin-1")):
                denier = WebsocketDenier()
                return await denier(scope, receive, send)
        return await self.application(scope, receive, send)

    @staticmethod
    def _allowed(origin: str) -> bool:
        host = urlparse(origin).hostname
        if not host:
            return False
        allowed = settings.ALLOWED_HOSTS or ["localhost", "127.0.0.1"]
        return any(pattern == "*" or is_same_domain(host, pattern) for pattern in allowed)
