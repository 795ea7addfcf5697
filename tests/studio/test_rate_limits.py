"""Sends per API key are rate limited (429 with Retry-After).

Each key's window is its own (a test's keys are new), so no test clears
the cache: on Redis that would empty the whole database, other runs' too."""

import threading
import uuid
from types import SimpleNamespace

from agents.models import Turn
from studio.auth.throttles import SendRateThrottle

from ..conftest import error_of


def send(client):
    return client.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json")


def test_sends_past_the_rate_get_429_with_retry_after(api, agent, studio_conf):
    studio_conf(SEND_RATE=(3, 60))  # 3 a minute

    responses = [send(api) for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert error_of(responses[-1])["code"] == "rate_limited"
    assert 0 < int(responses[-1]["Retry-After"]) <= 60
    assert Turn.objects.count() == 3  # the refused send never started a turn


def test_the_limit_is_per_key(api, admin_api, agent, studio_conf):
    studio_conf(SEND_RATE=(1, 60))  # 1 a minute

    statuses = [send(client).status_code for client in (api, api, admin_api, admin_api)]

    # Each key gets its one send, and only one.
    assert statuses == [200, 429, 200, 429]


def test_reads_are_not_limited_by_the_send_rate(api, agent, studio_conf):
    studio_conf(SEND_RATE=(1, 60))  # 1 a minute

    assert all(api.get("/api/v1/agents/dm").status_code == 200 for _ in range(5))
    # The reads took nothing from the key's one send a minute, which holds.
    assert [send(api).status_code for _ in range(2)] == [200, 429]


def test_the_limit_holds_exactly_under_concurrent_sends(studio_conf):
    """Forty sends of one key at once, limit 10: exactly 10 go through — the
    count is one atomic step in Redis, shared by every thread and process."""
    studio_conf(SEND_RATE=(10, 60))  # 10 a minute
    request = SimpleNamespace(auth=SimpleNamespace(prefix=f"concurrent-{uuid.uuid4().hex}"))
    start = threading.Barrier(40)
    allowed = []

    def try_send():
        start.wait()
        allowed.append(SendRateThrottle().allow_request(request, None))

    threads = [threading.Thread(target=try_send) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert allowed.count(True) == 10
    refused = SendRateThrottle()
    assert refused.allow_request(request, None) is False
    assert 0 < refused.wait() <= 60
