"""`studioctl upgrade` and `studioctl rollback`, end to end, on a checkout of
this code (release A) and a release B made from it that adds a migration
the way the releases that broke the documented rollback did: a table with a
foreign key to agents_agent, and a column on an existing table. The
deployment — its own PostgreSQL database, a web process run by
scripts/start.sh — is upgraded to B (pre-flight, backup, migrate, start),
rolled back to A (the backup restored into a new, empty database, swapped
in), and upgraded to B again: a `pg_restore --clean` over B's schema would
have failed on the foreign key and left the next `migrate` a DuplicateColumn."""

import re
import shutil
import subprocess
import textwrap
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import connection

from tests.support.database import database_url_of_this_test_run
from tests.support.deployment import ROOT, Deployment

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="upgrades back up with pg_dump"),
    pytest.mark.skipif(not shutil.which("pg_restore"), reason="PostgreSQL's client tools are not installed"),
]

RELEASE_B_MIGRATION = """
from django.db import migrations, models
import django.db.models.deletion


class Migration(migrations.Migration):
    dependencies = [("studio", "{last}"), ("agents", "{agents_last}")]

    operations = [
        migrations.CreateModel(
            name="ReleaseBNote",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("agent", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, to="agents.agent")),
            ],
        ),
        migrations.AddField(model_name="game", name="release_b_motto", field=models.TextField(null=True)),
    ]
"""


def git(folder: Path, *arguments: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=Tests", "-c", "user.email=tests@example.com", *arguments],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def last_migration(folder: Path) -> str:
    return sorted(path.stem for path in folder.glob("0*.py"))[-1]


@pytest.fixture
def releases(tmp_path) -> Path:
    """A checkout of this code (its uncommitted changes included) tagged
    test-a, and test-b after it; test-a checked out."""
    this_code = git(ROOT, "stash", "create") or git(ROOT, "rev-parse", "HEAD")
    checkout = tmp_path / "checkout"
    git(ROOT, "clone", "--quiet", "--shared", "--no-checkout", str(ROOT), str(checkout))
    git(checkout, "checkout", "--quiet", "--detach", this_code)
    git(checkout, "tag", "test-a")
    migration = RELEASE_B_MIGRATION.format(
        last=last_migration(checkout / "studio" / "migrations"),
        agents_last=last_migration(checkout / "agents" / "migrations"),
    )
    (checkout / "studio" / "migrations" / "9001_release_b.py").write_text(textwrap.dedent(migration))
    version = checkout / "studio" / "__init__.py"
    version.write_text(re.sub(r'__version__ = "([^"]+)"', r'__version__ = "\1+b"', version.read_text()))
    git(checkout, "add", "-A")
    git(checkout, "commit", "--quiet", "-m", "Release B: a table pointing at agents, a column on games")
    git(checkout, "tag", "test-b")
    git(checkout, "checkout", "--quiet", "test-a")
    (checkout / ".venv").symlink_to(
        ROOT / ".venv"
    )  # the packages of both releases (`--install-command true`)
    return checkout


@pytest.fixture
def database():
    """A database of this test's own (rollback renames databases)."""
    name = f"{connection.settings_dict['NAME']}_ctl{uuid.uuid4().hex[:4]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    yield name
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [name + "%"])
        for (made,) in cursor.fetchall():
            cursor.execute(f'DROP DATABASE "{made}" WITH (FORCE)')


@pytest.fixture
def deployment(releases, database, tmp_path):
    url = urlsplit(database_url_of_this_test_run())._replace(path=f"/{database}").geturl()
    procfile = tmp_path / "Procfile"
    web = next(line for line in (releases / "Procfile").read_text().splitlines() if line.startswith("web1:"))
    procfile.write_text(web + "\n")
    deployment = Deployment(
        releases,
        tmp_path,
        {
            "DATABASE_URL": url,
            "DJANGO_SECRET_KEY": "studioctl-tests-only-secret-key-9d2e4b7a1c8f3e6d5b0a7c2e9f4d1b8a",
            "DJANGO_ALLOWED_HOSTS": "studio.example.com",
            "DJANGO_SECURE_PROXY": "1",
            "STUDIO_BACKUP_DIR": str(tmp_path / "backups"),
            "STUDIO_SHUTDOWN_GRACE_SECONDS": "5",
        },
        PROCFILE=str(procfile),
    )
    migrated = deployment.manage("migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    made = deployment.manage("creategame", "ashmere", "--credits", "100")
    assert made.returncode == 0, made.stderr
    yield deployment
    deployment.tear_down()


def query(database: str, sql: str) -> list[str]:
    """`sql`'s rows on database `database` (another than the test's), a value each."""
    url = urlsplit(database_url_of_this_test_run())._replace(path=f"/{database}").geturl()
    done = subprocess.run(
        ["psql", "-X", "-At", "-d", url, "-c", sql], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def schema_of(database: str) -> tuple[set[str], set[str]]:
    """Its tables, and its columns as table.column."""
    columns = set(
        query(
            database,
            "SELECT table_name || '.' || column_name FROM information_schema.columns WHERE table_schema = 'public'",
        )
    )
    return {column.split(".")[0] for column in columns}, columns


def test_an_upgrade_then_its_rollback_then_the_upgrade_again(deployment, database, releases, tmp_path):
    deployment.ctl("start")
    assert deployment.status()["healthy"]

    dry = deployment.ctl("upgrade", "test-b", "--dry-run")
    assert "migrations the release adds (1): studio/migrations/9001_release_b.py" in dry.stdout
    assert git(releases, "describe", "--tags") == "test-a" and not list((tmp_path / "backups").glob("*.dump"))

    upgraded = deployment.ctl("upgrade", "test-b", "--yes", "--install-command", "true")
    after_upgrade = deployment.status()
    tables, columns = schema_of(database)
    assert git(releases, "describe", "--tags") == "test-b", upgraded.stdout
    assert after_upgrade["healthy"] and after_upgrade["processes"][0]["version"].endswith("+b")
    assert "studio_releasebnote" in tables and "studio_game.release_b_motto" in columns
    [backup] = (tmp_path / "backups").glob(f"{database}-*-before-upgrade.dump")
    assert str(backup) in upgraded.stdout
    assert deployment.manage("creategame", "since-the-upgrade").returncode == 0

    rolled_back = deployment.ctl("rollback", "--yes")
    after_rollback = deployment.status()
    tables, columns = schema_of(database)
    assert git(releases, "describe", "--tags") == "test-a", rolled_back.stdout
    assert after_rollback["healthy"] and not after_rollback["processes"][0]["version"].endswith("+b")
    assert "studio_releasebnote" not in tables and "studio_game.release_b_motto" not in columns
    assert query(database, "SELECT slug FROM studio_game") == [
        "ashmere"
    ]  # what was done since the upgrade went with it
    checked = deployment.manage("checkledger")
    assert checked.returncode == 0 and checked.stdout.startswith("ok "), checked.stdout
    [kept] = re.findall(rf"kept as ({database}_upgraded_\d+)", rolled_back.stdout)
    assert "studio_releasebnote" in schema_of(kept)[0]  # the upgraded one, kept for the operator

    again = deployment.ctl("upgrade", "test-b", "--yes", "--install-command", "true")
    assert git(releases, "describe", "--tags") == "test-b", again.stdout
    assert deployment.status()["healthy"]
    assert "studio_game.release_b_motto" in schema_of(database)[1]


def test_a_rollback_without_an_upgrade_changes_nothing(deployment, releases):
    refused = deployment.ctl("rollback", "--yes", check=False)

    assert refused.returncode == 1
    assert "no upgrade to roll back" in refused.stderr
    assert git(releases, "describe", "--tags") == "test-a"


def test_an_upgrade_with_local_changes_in_the_checkout_fails_its_pre_flight(deployment, releases, tmp_path):
    (releases / "manage.py").write_text((releases / "manage.py").read_text() + "\n# a local change\n")

    refused = deployment.ctl("upgrade", "test-b", "--yes", "--install-command", "true", check=False)

    assert refused.returncode == 1
    assert "the checkout has local changes" in refused.stdout
    assert "pre-flight failed; nothing was changed" in refused.stderr
    assert git(releases, "describe", "--tags") == "test-a"
    assert not list((tmp_path / "backups").glob("*.dump"))
