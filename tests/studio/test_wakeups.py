"""Wake-ups: a waiting request is woken by a change in this process or
another, and waits holding no database connection."""

import threading
import time

import pytest
from django.conf import settings
from django.db import connection

from studio.runtime import wakeups
from studio.runtime.redisconn import redis_client

from ..conftest import WAIT_SECONDS


def test_a_change_in_this_process_wakes_its_waiter():
    with wakeups.listening("turns.test-local") as waiter:
        threading.Timer(0.05, wakeups.notify, args=("turns.test-local",)).start()

        assert waiter.wait(5) is True


def test_a_waiter_is_not_woken_by_another_key():
    with wakeups.listening("turns.test-one") as waiter:
        waiter.wait(0.01)  # anything from before
        wakeups.notify("turns.test-other")

        assert waiter.wait(0.2) is False


@pytest.mark.skipif(not settings.REDIS_URL, reason="wake-ups cross processes through Redis")
def test_a_change_announced_by_another_process_wakes_the_waiter():
    with wakeups.listening("turns.test-remote") as waiter:
        waiter.wait(2)  # the subscriber connects, and wakes everyone once as it does
        # What another process's notify() sends:
        redis_client().publish(f"{settings.CHANNEL_PREFIX}:wake:turns.test-remote", b"")

        assert waiter.wait(5) is True


@pytest.mark.django_db(transaction=True)
def test_a_waiter_hands_its_database_connection_back_while_it_waits():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert connection.connection is not None

    with wakeups.listening("turns.test-connection") as waiter:
        waiter.wait(0.01)

    assert connection.connection is None


# --- a turn's end is sent to other processes only while someone waits for it ---------

needs_redis = pytest.mark.skipif(not settings.REDIS_URL, reason="wake-ups cross processes through Redis")


class _Heard:
    """What another process would hear: a subscriber of every wake-up."""

    def __init__(self):
        self.pubsub = redis_client(blocking=True).pubsub()
        self.pubsub.psubscribe(f"{settings.CHANNEL_PREFIX}:wake:*")
        # Subscribed once Redis confirms it: nothing sent after is missed.
        confirmed = self.pubsub.get_message(timeout=WAIT_SECONDS)
        assert confirmed is not None and confirmed["type"] == "psubscribe", confirmed

    def through(self, marker: str) -> list[str]:
        """The keys heard up to `marker` (a cancel key, always sent, notified
        last: the wake-ups go out in order, so everything before it is in)."""
        wakeups.notify(marker)
        heard = []
        while True:
            message = self.pubsub.get_message(timeout=WAIT_SECONDS)
            assert message is not None, f"{marker} was never heard"
            key = message["channel"].decode().rpartition(":wake:")[2]
            if key == marker:
                return heard
            heard.append(key)

    def close(self):
        self.pubsub.close()


@pytest.fixture
def heard():
    listener = _Heard()
    yield listener
    listener.close()


@needs_redis
def test_a_turns_end_nobody_waits_for_is_not_sent_to_other_processes(heard):
    wakeups.notify("turns.test-nobody")

    assert heard.through("cancel.test-nobody") == []


@needs_redis
def test_a_turns_end_is_sent_while_a_waiter_waits_for_it_and_not_after(heard):
    with wakeups.listening("turns.test-waited") as waiter:
        wakeups.notify("turns.test-waited")
        assert heard.through("cancel.test-waited-1") == ["turns.test-waited"]
        assert waiter.wait(5) is True

    wakeups.notify("turns.test-waited")
    assert heard.through("cancel.test-waited-2") == []


@needs_redis
def test_a_cancel_is_sent_whether_or_not_anyone_waits(heard):
    wakeups.notify("cancel.test-always")

    assert heard.through("cancel.test-always-marker") == ["cancel.test-always"]


@needs_redis
def test_a_waiter_whose_process_died_stops_counting_once_its_announcement_lapses(heard, monkeypatch):
    monkeypatch.setattr(wakeups, "ANNOUNCE_SECONDS", 1)
    wakeups._Announcement("turns.test-died")  # announced, never withdrawn: its process died

    time.sleep(1.5)  # past its lapse, on Redis's clock

    wakeups.notify("turns.test-died")
    assert heard.through("cancel.test-died") == []


@needs_redis
def test_a_waiter_renews_its_announcement_as_it_waits(heard, monkeypatch):
    monkeypatch.setattr(wakeups, "ANNOUNCE_SECONDS", 1)
    with wakeups.listening("turns.test-long") as waiter:
        time.sleep(1.5)  # its first announcement has lapsed
        monkeypatch.setattr(wakeups, "ANNOUNCE_SECONDS", 60)
        monkeypatch.setattr(wakeups, "ANNOUNCE_RENEW_SECONDS", 0)
        waiter.wait(0)  # renewed before it sleeps

        wakeups.notify("turns.test-long")
        assert heard.through("cancel.test-long") == ["turns.test-long"]


@needs_redis
def test_a_waiter_announces_itself_again_once_its_process_reconnects_to_redis(heard):
    with wakeups.listening("turns.test-restart") as waiter:
        redis_client().delete(wakeups._waiting_key("turns.test-restart"))  # Redis restarted: all lost
        wakeups._reconnected()  # as the subscriber does once it is back

        assert waiter.wait(5) is True  # every waiter looks again
        waiter.wait(0)  # and announces itself again before it waits
        wakeups.notify("turns.test-restart")
        assert heard.through("cancel.test-restart") == ["turns.test-restart"]


@needs_redis
def test_a_waiter_still_wakes_by_looking_again_when_redis_refuses_its_announcement(monkeypatch):
    from studio.runtime import slots

    def refused(*args, **kwargs):
        raise ConnectionError("Redis is away")

    monkeypatch.setattr(slots, "_take_script", refused)
    monkeypatch.setattr(slots, "redis_client", refused)
    monkeypatch.setattr(slots, "lean_client", refused)
    with wakeups.listening("turns.test-refused") as waiter:
        assert waiter.announcement is not None
        assert waiter.wait(0.01) is False  # no error: it looks again on its own
