"""Django's ASGI handler, its middleware chain entered once per request.

Django builds an ASGI handler's chain around its asynchronous core, so a
chain of synchronous middleware (all of the studio's are) is entered in a
worker thread, leaves it for the event loop at the innermost middleware,
and comes back to a thread for the view. Every view here is synchronous:
the chain is built as a WSGI handler builds it, synchronous to its core,
and the whole of it runs in one call in the request's worker thread.
"""

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class SyncChainASGIHandler(ASGIHandler):
    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)
        self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)
