"""How an HTTP request reaches the studio under ASGI (Daphne).

Django's ASGI handler builds its middleware chain around its asynchronous
core, so a chain of synchronous middleware (all of the studio's are) is
entered in a worker thread, leaves it for the event loop at the innermost
middleware, and comes back to a thread for the view. Every view here is
synchronous: the chain is built as a WSGI handler builds it, synchronous to
its core, and the whole of it runs in one call in the request's worker
thread.

A request body is read whole (into memory, then a temporary file) before
any view sees it, and Daphne reads it whole before the handler does. So a
body larger than STUDIO_MAX_BODY_BYTES is refused with 413 before that: on
its Content-Length as soon as its headers arrive, and a body without one
(chunked) as soon as what arrived passes the limit — by the handler, and by
Daphne's request, replaced for that (`daphne_body_limit_install`).
"""

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpResponse, JsonResponse

from . import lifecycle
from .errors import error_body


class BodyTooLarge(Exception):
    pass


def body_limit() -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def too_large_body(path: str) -> tuple[bytes, bytes]:
    """The 413's body and content type: the API's error shape under /api/."""
    message = (
        f"The request body is larger than the studio accepts ({body_limit()} bytes, STUDIO_MAX_BODY_BYTES)."
    )
    if path.startswith("/api/"):
        return JsonResponse(error_body("too_large", message)).content, b"application/json"
    return message.encode(), b"text/plain; charset=utf-8"


class SyncChainASGIHandler(ASGIHandler):
    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)
        self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)

    async def handle(self, scope, receive, send):
        if lifecycle.is_shutting_down() and scope["path"] not in PROBES:
            # Draining: what is in flight finishes here, anything new goes elsewhere.
            await self.send_response(_shutting_down(scope["path"]), send)
            return
        try:
            with lifecycle.working():
                if _declared_length(scope) > body_limit():
                    raise BodyTooLarge()
                await super().handle(scope, receive, send)
        except BodyTooLarge:
            body, content_type = too_large_body(scope["path"])
            response = HttpResponse(body, status=413, content_type=content_type.decode())
            # The rest of the body is left unread: the connection cannot serve another request.
            response["Connection"] = "close"
            await self.send_response(response, send)

    async def read_body(self, receive):
        """Django's, stopping once the body passes the limit."""
        return await super().read_body(_within_limit(receive))


# Answered while the process drains: the probes say what it is doing.
PROBES = ("/healthz", "/readyz", "/metrics")


def _shutting_down(path: str) -> HttpResponse:
    message = "This studio process is restarting; send the request again (the same Idempotency-Key is safe)."
    if path.startswith("/api/"):
        response = JsonResponse(error_body("shutting_down", message), status=503)
    else:
        response = HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = "1"
    response["Connection"] = "close"
    return response


def _within_limit(receive):
    """`receive`, raising BodyTooLarge once the body passes the limit."""
    read = 0

    async def receive_within_limit():
        nonlocal read
        message = await receive()
        read += len(message.get("body", b""))
        if read > body_limit():
            raise BodyTooLarge()
        return message

    return receive_within_limit


def _declared_length(scope) -> int:
    for name, value in scope.get("headers") or []:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def daphne_body_limit_install() -> None:
    """Have Daphne refuse a body over the limit as it arrives. Daphne takes
    a request's whole body in (into memory, or a temporary file on disk)
    before the application sees the request: its request class is replaced
    by one that answers 413 and closes the connection as soon as the
    headers declare too large a body, or the chunks that came pass the
    limit. (Run where the application is loaded: in Daphne's process.)"""
    from daphne import http_protocol

    if not getattr(http_protocol.WebRequest, "limits_body", False):
        http_protocol.WebRequest = type(
            "BodyLimitedWebRequest", (BodyLimitedRequest, http_protocol.WebRequest), {}
        )


class BodyLimitedRequest:
    """Mixed into Daphne's request class (a Twisted `http.Request`)."""

    limits_body = True
    body_received = 0
    is_refused = False

    def gotLength(self, length):
        super().gotLength(length)
        if length is not None and length > body_limit():
            self._refuse()

    def handleContentChunk(self, data):
        if self.is_refused:
            return
        self.body_received += len(data)
        if self.body_received > body_limit():
            self._refuse()
            return
        super().handleContentChunk(data)

    def process(self):
        if not self.is_refused:
            return super().process()
        return None

    def _refuse(self):
        self.is_refused = True
        # Twisted answers `Expect: 100-continue` after gotLength: it must
        # not, or the client would send the body after all.
        self.requestHeaders.removeHeader(b"Expect")
        target = getattr(self.channel, "_path", b"").decode("latin-1")
        body, content_type = too_large_body(target.split("?", 1)[0])
        head = (
            b"HTTP/1.1 413 Content Too Large\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (content_type, len(body))
        )
        self.channel.transport.write(head + body)
        self.channel.transport.loseConnection()
