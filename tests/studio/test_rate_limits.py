"""Sends per API key are rate limited (429 with Retry-After)."""

from django.core.cache import cache


def test_sends_past_the_rate_get_429_with_retry_after(api, agent, studio_conf):
    studio_conf(SEND_RATE="3/min")
    cache.clear()

    statuses = [api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json") for _ in range(4)]

    assert [r.status_code for r in statuses] == [200, 200, 200, 429]
    assert statuses[-1].json()["error"]["code"] == "rate_limited"
    assert int(statuses[-1]["Retry-After"]) > 0


def test_the_limit_is_per_key(api, admin_api, agent, studio_conf):
    studio_conf(SEND_RATE="1/min")
    cache.clear()

    first = api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json")
    other_key = admin_api.post("/api/v1/agents/dm/messages", {"content": "hi"}, format="json")

    assert (first.status_code, other_key.status_code) == (200, 200)


def test_reads_are_not_limited_by_the_send_rate(api, agent, studio_conf):
    studio_conf(SEND_RATE="1/min")
    cache.clear()

    assert all(api.get("/api/v1/agents/dm").status_code == 200 for _ in range(5))
