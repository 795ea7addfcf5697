"""A listener that hears nothing for a while stays connected: the channel
layer waits on Redis in blocking reads, and a Redis client's socket
time-out shorter than such a read (redis-py 8 sets one of 5 s by default)
would end every quiet listener with close code 1011, over and over.

It idles for seconds, spending no CPU: under pytest-xdist the other
workers run their tests meanwhile."""

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels_redis.core import RedisChannelLayer

from tests.support.live import connect, events_until
from tests.support.sending import turn_send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("event_buffers_cleared")]

# Longer than one blocking receive of the layer (and so than redis-py's
# default socket time-out, which is no longer).
IDLE_SECONDS = RedisChannelLayer.brpop_timeout + 2


@pytest.mark.slow  # heavy by design: it sits idle past a Redis read; left out of `make test-fast` (#38)
async def test_a_listener_idle_longer_than_a_redis_read_stays_connected_and_hears_the_next_turn(
    define, designer_key, settings
):
    assert settings.REDIS_URL, "this test is about the Redis channel layer"
    agent = await database_sync_to_async(define)("dm")
    listener = await connect("/ws/v1/agents/dm/events", key=designer_key)
    assert (await listener.receive_json_from())["type"] == "hello"

    await asyncio.sleep(IDLE_SECONDS)
    assert await listener.receive_nothing(timeout=0.1), "the idle listener was sent something (a close?)"

    await database_sync_to_async(turn_send)(agent=agent, content="hello")
    events = await events_until(listener, "turn.finished")

    assert [e["type"] for e in events][0] == "turn.started"
    assert events[-1]["status"] == "completed"
    await listener.disconnect()
