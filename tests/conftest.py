"""The cast: a game with an admin and a designer key, and an outsider — a
key of another game; on the pages, a designer and an admin of the game and
an outsider (an admin of another game only). Plus helpers to define agents,
play scripts and read error answers."""

import gc
import json
import os
import threading
import time
from pathlib import Path
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.db import OperationalError, connection, connections
from django.test import Client
from rest_framework.test import APIClient

from agents.providers.base import CALL_THREADS
from agents.sending.engine import _deadlines
from agents.services import AgentDefinition, agent_define
from billing.defaults import seed
from billing.models import Fee, ModelPrice
from studio.auth.keys import apikey_create
from studio.models import Membership, Role
from studio.services import game_create
from tests.support import template_db

# The suite runs on the `scripted` test model with DEBUG off (pytest-django
# forces it). This process's settings are loaded already (`scripted_allowed`
# below sees to them); the servers and workers tests start inherit this.
os.environ.setdefault("STUDIO_ALLOW_SCRIPTED_MODEL", "1")

# --- markers (pytest.ini): `browser` and `processes`, which `make test-fast` leaves out ----

TESTS = Path(__file__).resolve().parent
# Folders whose every test starts processes: web servers, Celery workers,
# a Redis of its own, the clients' test runs.
PROCESS_FOLDERS = {"scale", "faults", "clients", "ops"}
# Fixtures that start one: a Daphne server (tests/live, tests/scale), a
# Celery worker (tests/agents), nginx in front of Daphne.
PROCESS_FIXTURES = {"web", "start_worker", "daphne", "nginx"}


# The fixture of the transactional modules that plays the nine-block story
# (tests/support/time_story.py) for each test: ten requests, a compaction and
# a forced checkpoint, committed, before the test begins.
PLAYED_STORY_FIXTURE = "story"


def pytest_sessionstart(session):
    # Each worker's PostgreSQL test database is a copy of one migrated once.
    template_db.install()


def pytest_collection_modifyitems(config, items):
    """Mark each test by its folder and fixtures; a module that starts
    processes otherwise (manage.py, a script) says so in its pytestmark.
    A transactional test that plays the story for itself is slow by design
    (the story alone is ~0.7 s; the tests that only read it share one per
    module in tests/agents/story/, and are not)."""
    for item in items:
        if not item.path.is_relative_to(TESTS):
            continue
        folder = item.path.relative_to(TESTS).parts[0]
        if folder == "browser":
            item.add_marker(pytest.mark.browser)
        elif folder in PROCESS_FOLDERS or PROCESS_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.processes)
        if PLAYED_STORY_FIXTURE in item.fixturenames and _transactional(item):
            item.add_marker(pytest.mark.slow)


def _transactional(item) -> bool:
    marker = item.get_closest_marker("django_db")
    return marker is not None and bool(marker.kwargs.get("transaction") or marker.args[:1] == (True,))


def pytest_collection_finish(session):
    """What collection built (the modules, their tests, Django's apps and
    models) lives as long as the run: frozen out of the garbage collector's
    sight, its full collections no longer walk it (they took ~4% of a
    worker's time, half of it on these objects)."""
    gc.collect()
    gc.freeze()


def script(*steps) -> str:
    """A message the scripted model plays: calls, sleeps, fails and a say."""
    return json.dumps({"script": list(steps)})


# A script step that holds the turn running until the test cancels it: far
# longer than any test takes to cancel, even on a loaded machine (the tests'
# environment raises the scripted model's sleep cap past it).
UNTIL_CANCELLED = {"sleep": 120}


def call(tool: str, **args) -> dict:
    return {"call": tool, "args": args}


def in_thread(fn, *args, **kwargs):
    """Run fn in a thread with its own DB connection; returns (thread, box)."""
    box = {}

    def target():
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as error:  # surfaced by the test
            box["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    return thread, box


# How long a wait for a state waits by default: only a hang takes this long,
# however loaded the machine (a test passes as soon as the state is reached).
WAIT_SECONDS = 60.0


def wait_for(predicate, timeout=WAIT_SECONDS):
    """Until `predicate()` is true; fails the test only on a hang."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def events_published() -> None:
    """Until every event this process has published so far is stamped into
    its agent's buffer: the publisher's thread does that behind the commit
    that sent it, so an answer can reach the test first."""
    from studio.live.events import after_published

    done = threading.Event()
    after_published(done.set)
    assert done.wait(WAIT_SECONDS), "the event publisher did not catch up"


def error_of(response) -> dict:
    """An error answer's {"code", "message"}, checked to be the studio's one
    error shape: JSON with both set."""
    assert response["Content-Type"] == "application/json", response.content[:300]
    error = json.loads(response.content)["error"]
    assert error["code"] and error["message"], error
    return error


def client_for(key: str | None) -> APIClient:
    client = APIClient()
    if key:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture(scope="session", autouse=True)
def no_stray_connections(django_db_setup, django_db_blocker):
    """After the run, end sessions other threads or processes left open on
    the test database, so it can be dropped."""
    yield
    # A run whose tests use no database sets none up (Django names test
    # databases test_…): there is nothing to end, and no database to ask.
    if connection.vendor != "postgresql" or not connection.settings_dict["NAME"].startswith("test_"):
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


# What migrate's post_migrate step fills (the content types and the
# permissions), and so the same before and after every test.
FILLED_BY_MIGRATE = {"django_content_type", "auth_permission"}


# Where the rows the migrations seed are kept, on PostgreSQL, for the
# flush to put back (a schema Django's introspection does not look in).
SEEDED_COPIES = "test_seeded"


@pytest.fixture(scope="session", autouse=True)
def flush_leaves_what_migrate_made(django_db_setup, django_db_blocker):
    """After each transactional test pytest-django empties every table
    (Django's flush), then has post_migrate fill the content types and
    permissions again. The rows the migrations seed (the starting price
    list and fees) it does not put back: without this, a test would find
    them or not depending on whether a transactional test ran before it in
    its process. Here the flush seeds them again, so every test starts on
    the database as migrate left it.

    On PostgreSQL the flush is also made cheaper: its one TRUNCATE of every
    table and post_migrate's work cost more than most tests. It DELETEs the
    rows instead and copies the seeded rows back from a copy taken as the
    run began — one statement, one round trip (Django's foreign keys are
    checked at its commit) — and the rows post_migrate would put back it
    leaves, so that need not run."""
    from django.core.management.commands import flush

    emit_post_migrate = flush.emit_post_migrate_signal

    def after_flush(verbosity, interactive, database, **kwargs):
        emit_post_migrate(verbosity, interactive, database, **kwargs)
        seed(ModelPrice, Fee)

    if connection.vendor != "postgresql":
        with mock.patch.object(flush, "emit_post_migrate_signal", after_flush):
            yield
        return

    if not connection.settings_dict["NAME"].startswith("test_"):
        # No test of this run uses the database, so none was set up: the
        # connection names the real one, which is not the tests' to touch.
        yield
        return

    seeded = [ModelPrice._meta.db_table, Fee._meta.db_table]
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {SEEDED_COPIES} CASCADE; CREATE SCHEMA {SEEDED_COPIES}")
        for table in seeded:
            cursor.execute(f"CREATE TABLE {SEEDED_COPIES}.{table} AS SELECT * FROM {table}")
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    statement = " ".join(
        [f"DELETE FROM {connection.ops.quote_name(t)};" for t in tables if t not in FILLED_BY_MIGRATE]
        + [f"INSERT INTO {t} SELECT * FROM {SEEDED_COPIES}.{t};" for t in seeded]
    )

    def sql_flush(style, connection, **kwargs):
        return [statement]

    from django.db.backends.postgresql.operations import DatabaseOperations

    execute_sql_flush = DatabaseOperations.execute_sql_flush

    def execute_sql_flush_again_after_a_deadlock(self, sql_list):
        # A server a test started may still be finishing what the test
        # began (a replay removing its copy after it ended): its
        # deletes and the flush's can deadlock, and PostgreSQL then
        # picks one to fail. The flush tries again once the other is done.
        for attempt in range(5):
            try:
                return execute_sql_flush(self, sql_list)
            except OperationalError as error:
                if "deadlock" not in str(error) or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    with (
        mock.patch.object(flush, "sql_flush", sql_flush),
        mock.patch.object(flush, "emit_post_migrate_signal", lambda *args, **kwargs: None),
        mock.patch.object(DatabaseOperations, "execute_sql_flush", execute_sql_flush_again_after_a_deadlock),
    ):
        yield


@pytest.fixture(scope="session", autouse=True)
def connections_kept_between_transactional_tests():
    """Django closes this thread's connections after every transactional
    test, so the next one opens new ones: on PostgreSQL a server process
    started (~10 ms) that reads the catalog again for its first statements
    (~3 times their warm time) — a fifth of the database's CPU over the
    fast loop's transactional tests. A connection the test left clean is
    kept; one it left broken, in a transaction or out of autocommit, is
    closed as before."""
    from django.test import TransactionTestCase

    def close_unclean_only(self):
        for conn in connections.all(initialized_only=True):
            if conn.connection is not None and (
                conn.in_atomic_block or not conn.get_autocommit() or not conn.is_usable()
            ):
                conn.close()
        return False

    with mock.patch.object(TransactionTestCase, "_should_reload_connections", close_unclean_only):
        yield


@pytest.fixture(scope="session", autouse=True)
def redis_of_this_run_only():
    """What an earlier run left in Redis under this run's channel prefix —
    agents' event buffers, games' stream places, send and sign-in windows —
    is gone before the first test: it is keyed by ids, and ids start again
    with each test database, so it would land on this run's games and
    agents. (A test that needs none of its own run's left either clears it:
    `event_buffers_cleared`, `stream_slots_cleared`.)"""
    from django.conf import settings

    if not settings.REDIS_URL:
        return
    from studio.runtime.redisconn import redis_client
    from studio.runtime.wakeups import _glob_escaped

    for key in redis_client().scan_iter(match=_glob_escaped(settings.CHANNEL_PREFIX) + ":*", count=1000):
        redis_client().delete(key)


@pytest.fixture(scope="session", autouse=True)
def static_files_indexed_once():
    """WhiteNoise indexes every static file (a stat, its headers, its
    compressed copies) when a handler builds its middleware, which a web
    process does once; Django's test client does it for every client, and
    so for nearly every test — a quarter of the suite's CPU. Here a folder
    is indexed once per run, for the same root and prefix (a test that
    collects into a new folder of its own gets that folder indexed)."""
    from whitenoise.middleware import WhiteNoiseMiddleware

    indexed: dict = {}
    add_files, add_files_from_finders = (
        WhiteNoiseMiddleware.add_files,
        WhiteNoiseMiddleware.add_files_from_finders,
    )

    def once(key, middleware, index):
        """What `index` adds to a middleware's files, found on the first
        call with `key` (into an empty index), then added as it would."""
        if key not in indexed:
            kept, middleware.files = middleware.files, {}
            index()
            indexed[key], middleware.files = middleware.files, kept
        middleware.files.update(indexed[key])

    def add_files_once(self, root, prefix=None):
        once(("root", str(root), prefix), self, lambda: add_files(self, root, prefix))

    def add_files_from_finders_once(self):
        once(("finders", self.static_prefix), self, lambda: add_files_from_finders(self))

    with (
        mock.patch.object(WhiteNoiseMiddleware, "add_files", add_files_once),
        mock.patch.object(WhiteNoiseMiddleware, "add_files_from_finders", add_files_from_finders_once),
    ):
        yield


@pytest.fixture(autouse=True)
def model_calls_ended():
    """A model call a turn stopped waiting for ends in the background, then
    charges its turn: let it finish before the test's data goes."""
    since = CALL_THREADS.started
    yield
    CALL_THREADS.wait_quiet(10, since=since)


@pytest.fixture(autouse=True)
def game_tool_deadlines_forgotten():
    """A turn a test left waiting on a game's tool has a deadline in this
    process's timer; past the test it would fire in a later test, or after
    the test database is gone. It is dropped with the test's data."""
    yield
    _deadlines.forget()


@pytest.fixture(autouse=True)
def compactions_inline(settings):
    """Compactions run right after commit, in the test's own thread; the
    Celery tests start a real worker and switch the runner back."""
    settings.STUDIO = {**settings.STUDIO, "COMPACTION_RUNNER": "inline"}


@pytest.fixture(autouse=True)
def scripted_allowed(settings):
    """The offline `scripted` model is offered, as with DEBUG on; the tests
    of the setting itself switch it off."""
    settings.STUDIO = {**settings.STUDIO, "ALLOW_SCRIPTED_MODEL": True}


@pytest.fixture(autouse=True)
def fast_password_hasher(settings):
    """Every user a test creates has a password hashed once: a fast hasher
    keeps that cheap. The browser suite signs in through the real form
    against a server of its own, and keeps the real hashers."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def event_buffers_cleared(settings):
    """No agent's event stream left by an earlier test or run, in Redis or
    in this process's own buffers (the embedded default's): agent ids start
    again with each test database, and after a module's flush
    (tests/agents/story)."""
    from studio.live import events

    with events._memory_buffers.lock:
        events._memory_buffers.buffers.clear()
    if not settings.REDIS_URL:
        return
    from studio.runtime.redisconn import redis_client
    from studio.runtime.wakeups import _glob_escaped

    for key in redis_client().scan_iter(match=_glob_escaped(settings.CHANNEL_PREFIX) + ":events:*"):
        redis_client().delete(key)


@pytest.fixture
def stream_slots_cleared(settings):
    """No game's stream slots (or other places, studio/runtime/slots.py) left by an
    earlier run: ids start again with each test database."""
    from studio.runtime import slots

    slots._local.clear()
    if not settings.REDIS_URL:
        return
    from studio.runtime.redisconn import redis_client
    from studio.runtime.wakeups import _glob_escaped

    for key in redis_client().scan_iter(match=_glob_escaped(settings.CHANNEL_PREFIX) + ":slots:*"):
        redis_client().delete(key)


@pytest.fixture
def studio_conf(settings):
    """Change some of the STUDIO settings for one test: studio_conf(STORE_CAP_BYTES=100)."""

    def _change(**changes):
        settings.STUDIO = {**settings.STUDIO, **changes}

    return _change


@pytest.fixture
def game_and_key(db):
    return game_create(slug="ashmere", credits=100)


@pytest.fixture
def game(game_and_key):
    return game_and_key[0]


@pytest.fixture
def admin_key(game_and_key) -> str:
    return game_and_key[1]


@pytest.fixture
def designer_key(game) -> str:
    return apikey_create(game=game, role=Role.DESIGNER)[1]


@pytest.fixture
def other_game(db):
    return game_create(slug="elsewhere", credits=100)[0]


@pytest.fixture
def outsider_key(other_game) -> str:
    return apikey_create(game=other_game, role=Role.ADMIN)[1]


@pytest.fixture
def api(designer_key) -> APIClient:
    return client_for(designer_key)


@pytest.fixture
def admin_api(admin_key) -> APIClient:
    return client_for(admin_key)


@pytest.fixture
def outsider(outsider_key) -> APIClient:
    return client_for(outsider_key)


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


@pytest.fixture
def define(game):
    def _define(name="dm", **fields):
        fields.setdefault("memory_enabled", True)
        agent, _ = agent_define(
            game=game, name=name, definition=AgentDefinition(**fields), by=None, via="command"
        )
        return agent

    return _define


@pytest.fixture
def agent(define):
    return define("dm", system_prompt="You are the dungeon master.")


@pytest.fixture
def send(api):
    """POST a message through the API; returns the turn dict."""

    def _send(content, *, name="dm", transient=False, status=200):
        response = api.post(
            f"/api/v1/agents/{name}/messages",
            {"content": content, "transient": transient},
            format="json",
        )
        assert response.status_code == status, response.content
        return response.json().get("turn", response.json())

    return _send


QUEST_CHECKPOINT_SUMMARY = "Mara reached the drowned chapel."


def quest_checkpoint(agent, *, through: int, summary: str = QUEST_CHECKPOINT_SUMMARY):
    """A checkpoint in force through block `through`, holding one open
    memory `quest` ("Find the key.") whatever the store holds — for tests
    of what the model is sent, not of how checkpoints are made."""
    from agents.models import Checkpoint, CheckpointKind
    from agents.sending.context import checkpoint_fields

    quest = {"name": "quest", "description": "Now", "content": "Find the key.", "version": 1}
    fields = checkpoint_fields(summary=summary, open_memories=[quest], closed_memories=[])
    return Checkpoint.objects.create(
        agent=agent, kind=CheckpointKind.COMPACTION, through_block=through, **fields
    )


def compaction_attempt_failing(agent):
    """Queue a manual compaction and run one attempt of it by hand, which
    must fail and ask to be retried: the compaction as that left it. Set
    COMPACTION_RUNNER=none first, so that nothing else runs it."""
    from agents.compaction import CompactionRetry, compaction_request, compaction_run
    from agents.models import CompactionReason

    pending = compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    with pytest.raises(CompactionRetry):
        compaction_run(str(pending.uuid))
    pending.refresh_from_db()
    return pending


# --- the page users: studio users signed in through Django's test client ------------------


def with_query(path: str, **query) -> str:
    """`path` with `query` as its query string, in the order given."""
    return path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def assert_sends_to_sign_in(client, url: str) -> None:
    """A visitor who is not signed in is sent to sign in, and back after."""
    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"] == f"/studio/login/?next={url}"


def page_user(username: str, game=None, role: str = Role.DESIGNER):
    """A studio user; a member of `game` in `role` when a game is given."""
    user = get_user_model().objects.create_user(username, password="pw")
    if game is not None:
        Membership.objects.create(user=user, game=game, role=role)
    return user


@pytest.fixture
def designer(client, game) -> Client:
    """The test client, signed in as mara, a designer of the game."""
    client.force_login(page_user("mara", game))
    return client


@pytest.fixture
def admin(client, game) -> Client:
    """The test client, signed in as ines, an admin of the game."""
    client.force_login(page_user("ines", game, role=Role.ADMIN))
    return client


@pytest.fixture
def outsider_client(other_game) -> Client:
    """A client of its own, signed in as olaf, an admin of another game only."""
    client = Client()
    client.force_login(page_user("olaf", other_game, role=Role.ADMIN))
    return client
