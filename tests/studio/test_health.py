"""/healthz says the process is alive touching nothing; /readyz says
whether the database, Redis and the broker answer — 503 naming what does
not, never a 500, never waiting long."""

import time

import pytest
from django.conf import settings
from django.db import connections

from studio import health

# Nothing listens on port 1 of the loopback: a connection is refused at once.
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"

needs_redis = pytest.mark.skipif(not settings.REDIS_URL, reason="checks a real Redis (REDIS_URL)")


@pytest.fixture
def roomy_checks(monkeypatch):
    """A refused connection is named at once, but a check that starts on a
    machine busy with other test runs can pass its second before it gets to
    connect (it imports the broker's transport first): the checks that must
    name what refused them get the time."""
    monkeypatch.setattr(health, "CHECK_SECONDS", 10.0)


def test_healthz_answers_ok_touching_neither_the_database_nor_redis(client, settings):
    # No database access is allowed in this test (no `db` fixture): a query would fail it.
    settings.REDIS_URL = UNREACHABLE_REDIS

    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_healthz_takes_only_get_and_head(client):
    assert client.head("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405


@needs_redis
def test_readyz_is_200_with_each_check_when_the_database_redis_and_the_broker_answer(
    db, client, studio_conf, settings
):
    studio_conf(COMPACTION_RUNNER="celery")
    settings.CELERY_BROKER_URL = settings.REDIS_URL

    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "redis": "ok", "broker": "ok"},
    }


def test_readyz_without_redis_reports_redis_and_the_broker_as_not_used(db, client, studio_conf, settings):
    settings.REDIS_URL = ""
    settings.CELERY_BROKER_URL = "memory://"
    studio_conf(COMPACTION_RUNNER="thread")

    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "redis": "not used", "broker": "not used"}


def test_readyz_is_503_with_retry_after_naming_an_unreachable_redis(db, client, settings, roomy_checks):
    settings.REDIS_URL = UNREACHABLE_REDIS

    response = client.get("/readyz")

    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("unreachable: ")
    assert "Connection refused" in body["checks"]["redis"]


def test_readyz_is_503_naming_an_unreachable_broker(db, client, studio_conf, settings, roomy_checks):
    studio_conf(COMPACTION_RUNNER="celery")
    settings.CELERY_BROKER_URL = UNREACHABLE_REDIS

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("unreachable: ")


@pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"), reason="a database reached over the network"
)
def test_readyz_is_503_naming_an_unreachable_database(db, client, monkeypatch, roomy_checks):
    # The check opens a connection of its own, here to a port where no
    # database listens; the test's own connection is already open.
    monkeypatch.setitem(connections.settings["default"], "HOST", "127.0.0.1")
    monkeypatch.setitem(connections.settings["default"], "PORT", "1")

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["checks"]["database"].startswith("unreachable: ")


def test_a_check_still_running_after_its_time_is_reported_as_timed_out_and_not_waited_for():
    started = time.monotonic()

    results = health._run_bounded({"slow": lambda: time.sleep(1) or "ok", "quick": lambda: "ok"}, 0.1)

    assert time.monotonic() - started < 0.5
    assert results == {"slow": "timed out after 0.1 s", "quick": "ok"}
