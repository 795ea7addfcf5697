"""Real web processes (Daphne, as in production) on this test run's
database and Redis."""

import os
from pathlib import Path

from django.conf import settings

from bench.launcher import Daphne, serve

from .database import database_url_of_this_test_run


def start_web(logs: Path, count: int, *, options=(), **extra_env) -> tuple[list[Daphne], list[str]]:
    """`count` Daphne processes on this test run's database and Redis,
    started with Daphne's `options`."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_this_test_run(),
        "REDIS_URL": settings.REDIS_URL,
        "STUDIO_CHANNEL_PREFIX": settings.CHANNEL_PREFIX,
        "STUDIO_COMPACTION_RUNNER": "none",
        "STUDIO_SEND_RATE": "1000/s",
        **extra_env,
    }
    servers = serve(count, env, logs, options=options)
    return servers, [server.url for server in servers]


def stop_web(servers: list[Daphne]) -> None:
    for server in servers:
        server.stop()
