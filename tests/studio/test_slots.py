"""A game's stream slots (studio/runtime/slots.py), in Redis and, without it,
in the process: at most STUDIO_MAX_STREAMS_PER_GAME held at once; one
given back or lapsed is free again, one renewed is kept."""

import time
from types import SimpleNamespace

import pytest
from django.conf import settings

from studio.runtime import slots
from studio.runtime.slots import (
    TooManyStreams,
    stream_slot_give_back,
    stream_slot_renew,
    stream_slot_take,
)

GAME = 987_654  # no game of the test database: its slots are this test's


@pytest.fixture(params=["redis", "in-process"])
def counted_where(request, settings, studio_conf, monkeypatch):
    if request.param == "redis" and not settings.REDIS_URL:
        pytest.skip("needs Redis (REDIS_URL)")
    if request.param == "in-process":
        settings.REDIS_URL = ""
    studio_conf(MAX_STREAMS_PER_GAME=2)
    yield request.param
    slots._local.pop(slots.streams_key(GAME), None)
    if request.param == "redis":
        from studio.runtime.redisconn import redis_client

        redis_client().delete(slots.streams_key(GAME))


def test_a_game_holds_at_most_its_limit_and_a_slot_given_back_is_free(counted_where):
    first, second = stream_slot_take(GAME), stream_slot_take(GAME)

    with pytest.raises(TooManyStreams) as refused:
        stream_slot_take(GAME)
    stream_slot_give_back(first)
    stream_slot_give_back(first)  # twice: harmless
    third = stream_slot_take(GAME)

    assert refused.value.status == 429 and refused.value.code == "too_many_streams"
    assert refused.value.headers()["Retry-After"]
    with pytest.raises(TooManyStreams):
        stream_slot_take(GAME)
    for slot in (second, third):
        stream_slot_give_back(slot)


@pytest.fixture
def clock(monkeypatch):
    """The time the slots are counted at, moved on by the test."""
    now = SimpleNamespace(value=time.time())
    monkeypatch.setattr(slots, "time", SimpleNamespace(time=lambda: now.value))
    return now


def test_the_slots_of_a_stream_that_stopped_renewing_lapse_and_a_renewed_one_stays(counted_where, clock):
    lease = slots.lease_seconds()
    renewed = stream_slot_take(GAME)
    stream_slot_take(GAME)  # its process died: never renewed, never given back

    for _ in range(3):
        clock.value += lease / 2
        stream_slot_renew(renewed)

    assert stream_slot_take(GAME)  # the dead one's slot lapsed
    with pytest.raises(TooManyStreams):
        stream_slot_take(GAME)  # the renewed one still counts


def test_another_games_slots_are_its_own(counted_where):
    stream_slot_take(GAME)
    stream_slot_take(GAME)

    assert stream_slot_take(GAME + 1)
    slots._local.pop(slots.streams_key(GAME + 1), None)
    if settings.REDIS_URL:
        from studio.runtime.redisconn import redis_client

        redis_client().delete(slots.streams_key(GAME + 1))
