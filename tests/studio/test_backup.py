"""The backup and restore the docs give (the README in brief,
docs/operating.md in full), run for real: `pg_dump -Fc` of a studio that has
served turns, `pg_restore` into a fresh, empty database, and `checkledger`
agreeing on the restored copy. (`scripts/studioctl backup` and the docs'
blocks as written: tests/ops.)"""

import os
import shutil
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from django.db import connection

from tests.support.database import database_url_of_this_test_run
from tests.support.sources import ROOT

pytestmark = [
    pytest.mark.processes,  # pg_dump, pg_restore and manage.py
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="backups are PostgreSQL's pg_dump"),
    pytest.mark.skipif(not shutil.which("pg_restore"), reason="PostgreSQL's client tools are not installed"),
]

RESTORE = ["pg_restore", "--no-owner", "--exit-on-error"]


def postgres(*command: str, database: str | None = None, stdin=None) -> subprocess.CompletedProcess:
    """A PostgreSQL client tool run against this test run's server."""
    url = urlsplit(database_url_of_this_test_run())
    target = ["-d", database] if database else []
    server = ["-h", url.hostname, "-p", str(url.port), "-U", url.username]
    return subprocess.run(
        [*command, *server, *target], stdin=stdin, capture_output=True, text=True, timeout=120
    )


def restore(dump, database: str, command=RESTORE) -> subprocess.CompletedProcess:
    """The docs' restore: the dump on its standard input."""
    with open(dump, "rb") as archive:
        return postgres(*command, database=database, stdin=archive)


@pytest.fixture
def dump(tmp_path, agent, send):
    send("Hello?")
    path = tmp_path / "studio.dump"
    made = postgres("pg_dump", "-Fc", "-f", str(path), database=connection.settings_dict["NAME"])
    assert made.returncode == 0, made.stderr
    return path


@pytest.fixture
def fresh_database():
    name = f"{connection.settings_dict['NAME']}_restored"
    postgres("dropdb", "--if-exists", name)
    assert postgres("createdb", name).returncode == 0
    yield name
    postgres("dropdb", "--if-exists", name)


def checkledger(database: str) -> subprocess.CompletedProcess:
    url = urlsplit(database_url_of_this_test_run())._replace(path=f"/{database}").geturl()
    return subprocess.run(
        [sys.executable, "manage.py", "checkledger"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_guides_restore_fills_a_fresh_database_and_the_ledger_agrees(dump, fresh_database):
    restored = restore(dump, fresh_database)
    checked = checkledger(fresh_database)

    assert restored.returncode == 0, restored.stderr
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("ok ")


def test_a_restore_into_a_database_that_holds_the_data_fails_rather_than_mixing_them(dump, fresh_database):
    restore(dump, fresh_database)

    again = restore(dump, fresh_database)

    assert again.returncode != 0  # --exit-on-error: the docs restore into an empty database only
    assert "already exists" in again.stderr


@pytest.mark.parametrize("doc", ["README.md", "docs/operating.md"])
def test_the_docs_give_these_commands(doc):
    text = (ROOT / doc).read_text()

    assert "studioctl backup" in text
    assert "pg_restore --no-owner --exit-on-error" in text
    assert "pg_restore --clean" not in text  # over an upgraded schema it fails, and leaves a mix
