"""/healthz says the process is alive touching nothing; /readyz says
whether this process can serve sends — 503 only when it cannot (the
database unreachable, migrations not applied, shutting down), 200 with
`degraded` when what sends do without is down (Redis, the broker, the
workers) — never a 500, never waiting long, and naming what it found only
to a caller with the metrics token. It checks at most once a second, on
threads of its own, and the migrations less often still."""

import os
import threading

import pytest
from django.conf import settings
from django.db import connections

import studio
from studio.ops import health, heartbeats
from studio.runtime.redisconn import redis_client
from studio.serving import lifecycle

# Nothing listens on port 1 of the loopback: a connection is refused at once.
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"

needs_redis = pytest.mark.skipif(not settings.REDIS_URL, reason="checks a real Redis (REDIS_URL)")


TOKEN = "a-token-for-the-scraper"


@pytest.fixture(autouse=True)
def fresh_readiness():
    """Each test sees checks of its own settings, not an answer kept from
    the test before."""
    health.readiness_forget()
    yield
    health.readiness_forget()


@pytest.fixture
def workers_forgotten(settings):
    """No worker heartbeat left from an earlier test on this Redis."""
    if settings.REDIS_URL:
        redis_client().delete(heartbeats.workers_key())
    yield
    if settings.REDIS_URL:
        redis_client().delete(heartbeats.workers_key())


@pytest.fixture
def detailed(client, settings):
    """GET /readyz with the metrics token, so the answer names each check."""
    settings.STUDIO_METRICS_TOKEN = TOKEN

    def get():
        return client.get("/readyz", headers={"authorization": f"Bearer {TOKEN}"})

    return get


@pytest.fixture(autouse=True)
def roomy_checks(monkeypatch):
    """A refused connection is named at once, but a check that starts on a
    machine busy with other test runs can pass its second before it gets to
    connect (it imports the broker's transport first), and a database's
    `SELECT 1` too: every check gets far more time than a loaded machine
    takes (what a check that runs out of time answers is tested on its own)."""
    monkeypatch.setattr(health, "CHECK_SECONDS", 30.0)


def test_healthz_answers_ok_touching_neither_the_database_nor_redis(client, settings):
    # No database access is allowed in this test (no `db` fixture): a query would fail it.
    settings.REDIS_URL = UNREACHABLE_REDIS

    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": studio.__version__}


def test_healthz_takes_only_get_and_head(client):
    assert client.head("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405


@needs_redis
def test_readyz_is_200_with_each_check_when_the_database_redis_the_broker_and_a_worker_answer(
    db, detailed, studio_conf, settings, workers_forgotten
):
    studio_conf(COMPACTION_RUNNER="celery")
    settings.CELERY_BROKER_URL = settings.REDIS_URL
    heartbeats.worker_heartbeat("celery@w1")

    response = detailed()

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["degraded"] is False
    assert body["checks"] == {
        "database": "ok",
        "migrations": "ok",
        "redis": "ok",
        "broker": "ok",
        "workers": "ok",
        "process": "ok",
    }
    [worker] = body["workers"]
    assert worker["name"] == "celery@w1" and 0 <= worker["seenSecondsAgo"] < 5


def test_readyz_without_redis_reports_redis_and_the_broker_as_not_used(db, detailed, studio_conf, settings):
    settings.REDIS_URL = ""
    settings.CELERY_BROKER_URL = "memory://"
    studio_conf(COMPACTION_RUNNER="thread")

    response = detailed()

    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "degraded": False,
        "checks": {
            "database": "ok",
            "migrations": "ok",
            "redis": "not used",
            "broker": "not used",
            "workers": "not used",
            "process": "ok",
        },
        "workers": [],
        # Which process answered, and its release (scripts/studioctl's rolling restart).
        "version": studio.__version__,
        "pid": os.getpid(),
    }


def test_readyz_is_200_degraded_naming_an_unreachable_redis_since_sends_work_without_it(
    db, detailed, settings, roomy_checks
):
    settings.REDIS_URL = UNREACHABLE_REDIS

    response = detailed()

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded" and body["degraded"] is True
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("unreachable: ")
    assert "Connection refused" in body["checks"]["redis"]


def test_readyz_is_200_degraded_naming_an_unreachable_broker(
    db, detailed, studio_conf, settings, roomy_checks
):
    studio_conf(COMPACTION_RUNNER="celery")
    settings.CELERY_BROKER_URL = UNREACHABLE_REDIS

    response = detailed()

    assert response.status_code == 200
    assert response.json()["degraded"] is True
    assert response.json()["checks"]["broker"].startswith("unreachable: ")


@needs_redis
def test_readyz_is_200_degraded_when_compactions_run_on_celery_and_no_worker_was_seen(
    db, detailed, studio_conf, settings, workers_forgotten
):
    studio_conf(COMPACTION_RUNNER="celery")
    settings.CELERY_BROKER_URL = settings.REDIS_URL

    response = detailed()

    assert response.status_code == 200
    body = response.json()
    assert body["degraded"] is True
    assert body["checks"]["workers"] == "none seen in the last 60 s"
    assert body["workers"] == []


@pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"), reason="a database reached over the network"
)
def test_readyz_is_503_naming_an_unreachable_database(db, detailed, monkeypatch, roomy_checks):
    # The check opens a connection of its own, here to a port where no
    # database listens; the test's own connection is already open.
    monkeypatch.setitem(connections.settings["default"], "HOST", "127.0.0.1")
    monkeypatch.setitem(connections.settings["default"], "PORT", "1")

    response = detailed()

    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert response.json()["status"] == "unavailable"
    assert response.json()["checks"]["database"].startswith("unreachable: ")


@pytest.fixture
def newest_migration_unapplied(transactional_db):
    """The code one migration ahead of the database: the newest migration of
    `studio` is recorded as not applied (on this test run's database), as
    when new code starts before `migrate` has run. Yields its name and a
    function that records it applied again (called after the test anyway)."""
    from django.db.migrations.recorder import MigrationRecorder

    newest = MigrationRecorder.Migration.objects.filter(app="studio").order_by("-applied", "-id").first()
    newest.delete()

    def migrate():
        MigrationRecorder.Migration.objects.get_or_create(app=newest.app, name=newest.name)

    yield f"studio.{newest.name}", migrate
    migrate()


def test_readyz_is_503_naming_the_migrations_not_applied_then_200_once_they_are(
    newest_migration_unapplied, detailed, monkeypatch
):
    name, migrate = newest_migration_unapplied
    behind = detailed()
    migrate()
    monkeypatch.setattr(health, "MIGRATIONS_CHECK_SECONDS", 0)
    health.readiness_forget()
    migrated = detailed()

    assert behind.status_code == 503
    assert int(behind["Retry-After"]) >= 1
    assert behind.json()["status"] == "unavailable"
    assert behind.json()["checks"]["migrations"] == f"1 not applied: {name}"
    assert behind.json()["checks"]["database"] == "ok"
    assert migrated.status_code == 200
    assert migrated.json()["checks"]["migrations"] == "ok"


def test_the_migrations_are_looked_at_again_only_every_few_seconds(db, client, monkeypatch):
    looks = []
    plan = health._migrations_not_applied
    monkeypatch.setattr(health, "_migrations_not_applied", lambda: looks.append(1) or plan())
    monkeypatch.setattr(health, "KEEP_SECONDS", 0)

    for _ in range(5):
        assert client.get("/readyz").status_code == 200

    assert len(looks) == 1


@pytest.fixture
def shutting_down():
    lifecycle.shutdown_begin()
    yield
    lifecycle._stopping.clear()  # this test process goes on serving the next tests


def test_readyz_is_503_while_the_process_shuts_down(db, detailed, shutting_down):
    response = detailed()

    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert response.json()["status"] == "unavailable"
    assert response.json()["checks"]["process"] == "shutting down"
    assert response.json()["checks"]["database"] == "ok"


def test_a_check_still_running_after_its_time_is_reported_as_timed_out_and_not_waited_for():
    release, ended = threading.Event(), threading.Event()

    def slow():
        release.wait(60)  # until the test is done with it (a minute if it never is)
        ended.set()
        return "ok"

    # The bound is far past what the quick check takes on a loaded machine.
    results = health._run_bounded({"slow": slow, "quick": lambda: "ok"}, 2)
    again = health._run_bounded({"slow": lambda: "never run: the first is still running"}, 2)
    # Neither waited for the slow check: it is still running.
    assert not ended.is_set()
    release.set()

    assert results == {"slow": "timed out after 2 s", "quick": "ok"}
    assert again == {"slow": "timed out after 2 s"}
    assert ended.wait(60)


# --- what anyone may see --------------------------------------------------------------------


@needs_redis
def test_readyz_tells_anyone_its_status_and_nothing_else(db, client, settings, roomy_checks):
    ready = client.get("/readyz")
    health.readiness_forget()
    settings.REDIS_URL = UNREACHABLE_REDIS
    degraded = client.get("/readyz")
    lifecycle.shutdown_begin()
    try:
        unready = client.get("/readyz")
    finally:
        lifecycle._stopping.clear()

    assert (ready.status_code, ready.json()) == (200, {"status": "ok", "degraded": False})
    assert (degraded.status_code, degraded.json()) == (200, {"status": "degraded", "degraded": True})
    assert (unready.status_code, unready.json()) == (503, {"status": "unavailable", "degraded": True})
    assert int(unready["Retry-After"]) >= 1


@pytest.mark.parametrize(
    "token, sent", [(TOKEN, "Bearer not-the-token"), (TOKEN, ""), ("", f"Bearer {TOKEN}")]
)
def test_the_checks_are_named_only_with_the_metrics_token(db, client, settings, token, sent):
    settings.STUDIO_METRICS_TOKEN = token
    settings.REDIS_URL = UNREACHABLE_REDIS

    response = client.get("/readyz", headers={"authorization": sent} if sent else {})

    assert response.json() == {"status": "degraded", "degraded": True}
    assert "127.0.0.1" not in response.content.decode()


CHECKS = ("_database_check", "_migrations_check", "_redis_check", "_broker_check", "_workers_check")


def _counted(monkeypatch, runs: list):
    """Each check, as it is, noting the thread it ran on in `runs`."""
    for name in CHECKS:
        check = getattr(health, name)

        def counting(check=check):
            runs.append(threading.current_thread())
            return check()

        monkeypatch.setattr(health, name, counting)


def test_a_flood_of_readyz_checks_once_a_second(db, client, monkeypatch):
    runs = []
    _counted(monkeypatch, runs)

    answers = {client.get("/readyz").status_code for _ in range(20)}

    assert answers == {200}
    assert len(runs) == len(CHECKS)  # each check once: the others were answered from the first


def test_the_checks_run_on_threads_kept_for_them(db, client, monkeypatch):
    runs = []
    _counted(monkeypatch, runs)
    monkeypatch.setattr(health, "KEEP_SECONDS", 0)

    for _ in range(10):
        assert client.get("/readyz").status_code == 200

    assert len(runs) == 10 * len(CHECKS)
    # A thread per check at most (`runs` keeps them: no id is reused).
    assert len({id(thread) for thread in runs}) <= len(CHECKS)
