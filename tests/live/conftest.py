import pytest
from channels.layers import get_channel_layer


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
