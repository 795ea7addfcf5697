"""How an HTTP request reaches the studio under ASGI (Daphne).

Django's ASGI handler builds its middleware chain around its asynchronous
core, so a chain of synchronous middleware (all of the studio's are) is
entered in a worker thread, leaves it for the event loop at the innermost
middleware, and comes back to a thread for the view. Every view here is
synchronous: the chain is built as a WSGI handler builds it, synchronous to
its core, and the whole of it runs in one call in the request's worker
thread — with the `request_started` signal before it and, for an answer
that is not streamed, the response's close (`request_finished`) after it:
one hand-off to the thread and back per request, where Django makes three.
The thread is one kept for requests (`RequestThreads`), not a new one (and
another to join it) per request; all of one request's synchronous work
runs in it, as Django's thread-sensitive calls require.

A request body is read whole (into memory, then a temporary file) before
any view sees it, and Daphne reads it whole before the handler does. So a
body larger than STUDIO_MAX_BODY_BYTES is refused with 413 before that: on
its Content-Length as soon as its headers arrive, and a body without one
(chunked) as soon as what arrived passes the limit — by the handler, and by
Daphne's request, replaced for that (`daphne_body_limit_install`).

Around the whole application (HTTP and WebSocket alike) `AccessLogged`
gives each request its id and writes the studio's access log: one line per
request, as JSON with the request id under STUDIO_LOG_FORMAT=json, in place
of Daphne's plain lines (which operators turn off: `daphne -v 0`). It times
each HTTP request to its response's status line for the metrics.
"""

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse, HttpResponse, JsonResponse
from django.urls import set_script_prefix, set_urlconf
from django.utils.log import log_response

from studio.errors import error_body
from studio.ops import logs, metrics
from studio.serving import lifecycle

access_log = logging.getLogger("studio.access")


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


class RequestThreads:
    """Threads kept for requests, each an executor of one thread (what
    `ThreadSensitiveContext` runs a request's synchronous work in), taken
    when a request starts and given back when it has ended. At most
    `idle_most` wait idle; past that, one given back ends its thread."""

    def __init__(self, idle_most: int = 32):
        self.idle_most = idle_most
        self.idle: list[ThreadPoolExecutor] = []
        self.lock = threading.Lock()

    def take(self) -> ThreadPoolExecutor:
        with self.lock:
            if self.idle:
                return self.idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        with self.lock:
            if len(self.idle) < self.idle_most:
                self.idle.append(executor)
                return
        executor.shutdown(wait=False)


class SyncChainASGIHandler(ASGIHandler):
    def __init__(self):
        super().__init__()
        self.threads = RequestThreads()

    def load_middleware(self, is_async=False):
        # Speed: two thread crossings per request (~0.6–1 ms of CPU); guarded by bench/agent_server.py (server CPU per message).
        super().load_middleware(is_async=False)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        # Speed: a thread started per request and another to join it; guarded by bench/agent_server.py (server CPU per message).
        executor = self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(executor)

    async def handle(self, scope, receive, send):
        if lifecycle.is_shutting_down() and scope["path"] not in PROBES:
            # Draining: what is in flight finishes here, anything new goes elsewhere.
            await self.send_response(_shutting_down(scope["path"]), send)
            return
        try:
            with lifecycle.working():
                if _declared_length(scope) > body_limit():
                    raise BodyTooLarge()
                await self._serve(scope, receive, send)
        except BodyTooLarge:
            body, content_type = too_large_body(scope["path"])
            response = HttpResponse(body, status=413, content_type=content_type.decode())
            # The rest of the body is left unread: the connection cannot serve another request.
            response["Connection"] = "close"
            response["X-Request-ID"] = logs.request_id_choose(_header(scope, b"x-request-id"))
            await self.send_response(response, send)

    async def read_body(self, receive):
        """Django's, stopping once the body passes the limit."""
        return await super().read_body(_within_limit(receive))

    async def _serve(self, scope, receive, send):
        """Django's `ASGIHandler.handle`, its synchronous steps in one hand-off
        (`_respond`): the body read, the request answered, a client that
        goes away first noticed (the answer is then not sent)."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return

        async def process_request():
            # Speed: two thread crossings per request (request_started, the response's close); guarded by bench/agent_server.py (server CPU per message).
            response = await sync_to_async(self._respond, thread_sensitive=True)(request, scope)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while it was sent
            return response

        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(process_request()),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                # Read, not raised: raised here, the task's exception would
                # hold this frame, whose locals hold the task — a cycle that
                # kept each request's objects alive until a full pass of
                # the garbage collector (a client that closes its connection
                # as its answer arrives ends its listener this way).
                error = task.exception()
                if isinstance(error, AssertionError):
                    body_file.close()
                if error is not None and not isinstance(error, RequestAborted):
                    raise error
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            if response.streaming:  # closed once streamed
                await sync_to_async(response.close)()
        body_file.close()

    def _respond(self, request, scope):
        """In the request's thread: `request_started`, the middleware chain
        and view, and — for an answer already whole — the response's
        close (`request_finished`: the database connection goes back)."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        set_urlconf(settings.ROOT_URLCONF)
        response = self._middleware_chain(request)
        response._resource_closers.append(request.close)
        if response.status_code >= 400:
            log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if not response.streaming:
            response.close()
        return response


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
    try:
        return int(_header(scope, b"content-length") or 0)
    except ValueError:
        return 0


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


# --- the access log ------------------------------------------------------------------


class AccessLogged:
    """`app`, each HTTP request and WebSocket through it given its id and
    logged once the application has returned (so a stream is logged when it
    ends): method, path (not the query, which may hold what a log should
    not), status, duration, the client's address and the request id.

    The id is the client's X-Request-ID when it is sane, else a new one,
    put in the request's headers for Django's middleware to keep (and echo)
    — so the access line, the response and every line logged meanwhile
    agree."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        exchange = Exchange(scope)
        logs.request_id_set(exchange.request_id)
        try:
            await self.app(exchange.scope, receive, exchange.watching(send))
        except Exception:
            exchange.failed = True
            raise
        finally:
            exchange.ended()


class Exchange:
    """A request (or WebSocket) on its way through, as its access line and
    the metrics see it."""

    def __init__(self, scope):
        self.started = time.monotonic()
        self.request_id = logs.request_id_choose(_header(scope, b"x-request-id"))
        headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"x-request-id"]
        self.scope = {**scope, "headers": [*headers, (b"x-request-id", self.request_id.encode())]}
        self.status: int | None = None
        self.answered_after: float | None = None
        self.close_code: int | None = None  # a WebSocket the studio closed
        self.failed = False

    def watching(self, send):
        async def watched(message):
            self._saw(message)
            await send(message)

        return watched

    def _saw(self, message: dict) -> None:
        kind = message["type"]
        if kind in ("http.response.start", "websocket.http.response.start"):
            self.status, self.answered_after = message["status"], time.monotonic() - self.started
        elif kind == "websocket.accept":
            self.status = 101
        elif kind == "websocket.close" and self.status is None:
            self.status = 403  # closed before it was accepted: Daphne refuses the handshake
        elif kind == "websocket.close":
            self.close_code = message.get("code", 1000)

    def ended(self) -> None:
        """The application has returned: without an answer, it failed (Daphne
        answers 500) or its client went away first (499, as nginx says)."""
        seconds = time.monotonic() - self.started
        status = self.status or (500 if self.failed else 499)
        if self.scope["type"] == "http":
            metrics.request_answered(self.scope["path"], status, self.answered_after or seconds)
        if settings.STUDIO_ACCESS_LOG:
            client = self.scope.get("client")
            fields = {
                "method": self.scope.get("method", "GET"),
                # Percent-encoded: nothing in it can break a line.
                "path": quote(self.scope["path"], safe="/:@!$&'()*+,;=-._~")[:2000],
                "status": status,
                "duration": round(seconds, 3),
                "client": client[0] if client else None,
            }
            if self.close_code is not None:
                fields["close_code"] = self.close_code
            # Django's end of the request forgot it in this context.
            logs.request_id_set(self.request_id)
            access_log.info(access_message(fields, self.request_id), extra={"fields": fields})


def access_message(fields: dict, request_id: str) -> str:
    """The access line in words (the plain-text format writes this alone)."""
    closed = f", closed {fields['close_code']}" if "close_code" in fields else ""
    return (
        f"{fields['method']} {fields['path']} {fields['status']}{closed} {fields['duration']:.3f} s "
        f"from {fields['client'] or '-'}, request {request_id}"
    )


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
    """Mixed into Daphne's request class (a Twisted `http.Request`). It also
    keeps Twisted from parsing a POST's form body into arguments: Daphne
    never reads them (the application gets the body), the parse ran on the
    event loop, and a malformed multipart body got Twisted's bare 400
    before the studio saw it."""

    limits_body = True
    body_received = 0
    is_refused = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._parsePOSTFormSubmission = False

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
