import logging

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger(__name__)


class SendRateThrottle(SimpleRateThrottle):
    """Sends per API key (STUDIO_SEND_RATE, e.g. "100/s"); past it, 429
    `rate_limited` with Retry-After. Counted in the shared cache (Redis when
    REDIS_URL is set), so the limit holds across web processes."""

    scope = "send"

    def get_rate(self):
        # Read per request (DRF reads its rates once, at import).
        return settings.STUDIO["SEND_RATE"]

    def get_cache_key(self, request, view):
        if request.auth is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.prefix}

    def allow_request(self, request, view):
        # A limit that cannot be counted (Redis down) lets the send through:
        # the limit protects the studio, it must not take it down.
        try:
            return super().allow_request(request, view)
        except Exception:
            log.warning("send rate not checked: the cache is unavailable", exc_info=True)
            return True
