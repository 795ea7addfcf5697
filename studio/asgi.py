"""The ASGI entry point: HTTP through Django, WebSocket through Channels.

`daphne studio.asgi:application` (and `manage.py runserver`, which is
Daphne's) serves both on one port.
"""

import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
django.setup(set_prefix=False)

from studio.serving.handlers import AccessLogged, SyncChainASGIHandler, daphne_body_limit_install  # noqa: E402

django_asgi_app = SyncChainASGIHandler()
# Daphne's process loads this module: its requests refuse oversized bodies as they arrive.
daphne_body_limit_install()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from agents.consumers import SUBPROTOCOL  # noqa: E402
from studio.live.wsorigin import BrowserOriginValidator  # noqa: E402
from studio.live.wsoutage import ClosedOnOutage  # noqa: E402
from studio.routing import websocket_urlpatterns  # noqa: E402
from studio.tokens import encoding_load  # noqa: E402

# Before the first request, not inside it: every send counts tokens.
encoding_load()

if "daphne.cli" in sys.modules:  # Daphne's own process (not a test's, nor a worker's)
    from django.conf import settings  # noqa: E402

    from studio.ops.process_metrics import process_metrics_start  # noqa: E402
    from studio.serving.lifecycle import daphne_drain_on_sigterm  # noqa: E402

    daphne_drain_on_sigterm(settings.STUDIO["SHUTDOWN_GRACE_SECONDS"])
    process_metrics_start()

application = AccessLogged(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": ClosedOnOutage(
                BrowserOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
                subprotocol=SUBPROTOCOL,
            ),
        }
    )
)

if "daphne.cli" in sys.modules:  # last: once everything above is loaded
    from studio.runtime.heap import heap_settle  # noqa: E402

    heap_settle()
