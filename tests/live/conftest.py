import httpx2
import pytest
from channels.layers import get_channel_layer

from tests.support.live import sockets_close
from tests.support.web import start_web, stop_web


@pytest.fixture(autouse=True)
async def sockets_closed():
    """Each test's sockets are closed as it ends (tests.support.live)."""
    yield
    await sockets_close()


@pytest.fixture(autouse=True)
def channel_locks_of_this_test_only():
    """channels-redis keeps a lock per receiving channel, shared by every
    consumer in the process. A receive cancelled while it waits for that
    lock (a consumer closing) leaves the lock behind, bound to this test's
    event loop, and the next test to wait on it fails with "bound to a
    different event loop". A server runs on one loop; each test has its own,
    so each starts with none of those locks."""
    yield
    layer = get_channel_layer()
    if hasattr(layer, "receive_clean_locks"):
        layer.receive_clean_locks = type(layer.receive_clean_locks)()


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    """A real Daphne server on the test database and Redis; its base URL."""
    processes, urls = start_web(tmp_path_factory.mktemp("web"), 1)
    yield urls[0]
    stop_web(processes)


@pytest.fixture
def http(web, designer_key):
    """An HTTP client of `web` with the designer's key."""
    with httpx2.Client(
        base_url=web, headers={"Authorization": f"Bearer {designer_key}"}, timeout=30
    ) as client:
        yield client
