"""`studioctl backup`: a pg_dump of the studio's database while it serves,
the newest N kept, and `--check` restoring the newest into a scratch
database (named after the deployment's) where `checkledger` and `migrate
--check` must pass — then dropped. Each run is recorded for the dead man's
switch (studio_last_run_timestamp_seconds{job="backup"})."""

import shutil
from decimal import Decimal

import pytest
from django.db import connection

from billing.models import Account
from studio.models import JobRun
from tests.support.database import database_url_of_this_test_run
from tests.support.deployment import ROOT, Deployment

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="backups are PostgreSQL's pg_dump"),
    pytest.mark.skipif(not shutil.which("pg_restore"), reason="PostgreSQL's client tools are not installed"),
]


@pytest.fixture
def deployment(tmp_path):
    return Deployment(
        ROOT,
        tmp_path,
        {
            "DATABASE_URL": database_url_of_this_test_run(),
            "DJANGO_SECRET_KEY": "studioctl-tests-only-secret-key-9d2e4b7a1c8f3e6d5b0a7c2e9f4d1b8a",
            "STUDIO_BACKUP_DIR": str(tmp_path / "backups"),
            "STUDIO_BACKUP_KEEP": "2",
        },
    )


def databases_named_like(prefix: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [prefix + "%"])
        return [row[0] for row in cursor.fetchall()]


def test_backups_rotate_and_the_newest_restores_into_a_scratch_database_that_passes_the_checks(
    deployment, tmp_path, agent, send
):
    send("Hello?")
    name = connection.settings_dict["NAME"]

    for _ in range(3):
        made = deployment.ctl("backup")
    checked = deployment.ctl("backup", "--check")

    dumps = sorted((tmp_path / "backups").glob(f"{name}-*.dump"))
    assert len(dumps) == 2, dumps  # STUDIO_BACKUP_KEEP
    assert "removed" in checked.stdout and str(dumps[-1]) in checked.stdout
    assert "every game's balance matches its ledger (1 game); every migration applied" in checked.stdout
    assert f"backed up {name} to" in made.stdout
    assert not databases_named_like(f"{name}_check_")  # the scratch database is gone
    assert {"backup", "backup_checked"} <= set(JobRun.objects.values_list("job", flat=True))
    assert not list((tmp_path / "backups").glob(".*.partial"))


def test_a_backup_whose_ledger_does_not_add_up_fails_its_check(deployment, game, tmp_path):
    # A balance no adjustment or cost line explains: what checkledger is for.
    Account.objects.filter(game=game).update(balance=Decimal("12345"))
    name = connection.settings_dict["NAME"]

    failed = deployment.ctl("backup", "--check", check=False)

    assert failed.returncode == 1
    assert "checkledger" in failed.stderr
    assert len(list((tmp_path / "backups").glob(f"{name}-*.dump"))) == 1  # the dump itself is kept
    assert not databases_named_like(f"{name}_check_")
    assert not JobRun.objects.filter(job="backup_checked").exists()
