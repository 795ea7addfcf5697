"""The test run's environment, set before Django reads its settings.

Loaded as a pytest plugin (`-p tests.environment` in pytest.ini): plugins
named there are imported before pytest-django loads the settings, which
conftest.py files are not. The servers, workers and commands the tests
start inherit it.
"""

import os
from urllib.parse import urlsplit

# DEBUG is off in tests (as in production), and with DEBUG off the studio
# refuses a missing or development secret key. This one is for tests only.
os.environ.setdefault(
    "DJANGO_SECRET_KEY", "tests-only-secret-key-3c9f1e7a52d84b06a1f5e2c7d9b3084f6e1a2b5c7d9e0f1a"
)
# The settings read a `.env` at the project's root (studio/envfile.py): a
# developer's own would change what the tests, and the processes they
# start, run on. They read an empty file instead.
os.environ["STUDIO_ENV_FILE"] = os.devnull
# A scripted sleep waits 10 s at most unless told otherwise: a turn a test
# holds running until it cancels it (tests/conftest.py's UNTIL_CANCELLED)
# must not end by itself while a loaded machine is slow to get there.
os.environ.setdefault("STUDIO_SCRIPTED_SLEEP_MAX_SECONDS", "300")


def _of_this_worker(worker: str) -> None:
    """Under pytest-xdist (`-n N`) each worker process runs on things of
    its own: pytest-django gives it a database (test_studio_gw0, …), and
    here it takes the Redis database after REDIS_URL's, plus its index
    (REDIS_URL's own is left to a run without workers, such as the
    browser suite run beside them), and a channel prefix of its own, since
    Redis's publish/subscribe reaches every database of the server."""
    index = int(worker.removeprefix("gw"))
    redis = urlsplit(os.environ.get("REDIS_URL", ""))
    if redis.scheme:
        number = int(redis.path.strip("/") or 0) + 1 + index
        os.environ["REDIS_URL"] = redis._replace(path=f"/{number}").geturl()
    database = urlsplit(os.environ.get("DATABASE_URL", "")).path.rsplit("/", 1)[-1] or "studio"
    prefix = os.environ.get("STUDIO_CHANNEL_PREFIX") or f"studio.{database}"
    os.environ["STUDIO_CHANNEL_PREFIX"] = f"{prefix}.{worker}"


if os.environ.get("PYTEST_XDIST_WORKER"):
    _of_this_worker(os.environ["PYTEST_XDIST_WORKER"])
