"""Wake-ups: a waiting request is woken by a change in this process or
another, and waits holding no database connection."""

import threading

import pytest
from django.conf import settings
from django.db import connection

from studio.runtime import wakeups
from studio.runtime.redisconn import redis_client


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
