"""Sends per API key are rate limited (429 with Retry-After)."""

from django.core.cache import cache


def test_sends_past_the_rate_get_429_with_retry_after(api, agent, studio_conf):
    studio_conf(SEND_RATE=(3, 60))  # 3 a minute
    cache.clear()

    statuses = [api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json") for _ in range(4)]

    assert [r.status_code for r in statuses] == [200, 200, 200, 429]
    assert statuses[-1].json()["error"]["code"] == "rate_limited"
    assert int(statuses[-1]["Retry-After"]) > 0


def test_the_limit_is_per_key(api, admin_api, agent, studio_conf):
    studio_conf(SEND_RATE=(1, 60))  # 1 a minute
    cache.clear()

    first = api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json")
    other_key = admin_api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json")

    assert (first.status_code, other_key.status_code) == (200, 200)


def test_reads_are_not_limited_by_the_send_rate(api, agent, studio_conf):
    studio_conf(SEND_RATE=(1, 60))  # 1 a minute
    cache.clear()

    assert all(api.get("/api/v1/agents/dm").status_code == 200 for _ in range(5))


def test_the_limit_holds_exactly_under_concurrent_sends(studio_conf):
    """Forty sends of one key at once, limit 10: exactly 10 go through — the
    count is one atomic step in Redis, shared by every thread and process."""
    import threading
    from types import SimpleNamespace

    from studio.throttles import SendRateThrottle

    studio_conf(SEND_RATE=(10, 60))  # 10 a minute
    cache.clear()
    request = SimpleNamespace(auth=SimpleNamespace(prefix="concurrent"))
    start = threading.Barrier(40)
    allowed = []

    def send():
        start.wait()
        allowed.append(SendRateThrottle().allow_request(request, None))

    threads = [threading.Thread(target=send) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert allowed.count(True) == 10
    refused = SendRateThrottle()
    assert refused.allow_request(request, None) is False
    assert 0 < refused.wait() <= 60
