"""Where this process is in its life: serving, or shutting down.

A web process that has been asked to stop (SIGTERM) stops taking new work
and lets what it runs finish within STUDIO_SHUTDOWN_GRACE_SECONDS; while it
does, `/readyz` answers 503 so a load balancer sends new requests elsewhere.
"""

import threading

_stopping = threading.Event()


def shutdown_begin() -> None:
    """This process has been asked to stop."""
    _stopping.set()


def is_shutting_down() -> bool:
    return _stopping.is_set()
