"""The `.env` file is read by every process that loads the settings —
`manage.py`, Daphne, Celery — so the guide's "copy .env.example to .env,
then migrate" works; what the real environment sets wins over the file.
(The test run points STUDIO_ENV_FILE at an empty file, tests/environment.py,
so a developer's own `.env` never reaches the tests.)"""

import os
import secrets
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from studio.envfile import env_file_load, env_file_path, env_file_read
from tests.support.database import database_url_of_this_test_run
from tests.support.sources import ROOT

# Most of these start Python, manage.py or Celery.
pytestmark = pytest.mark.processes


def run_python(*args: str, env_file, **env: str) -> subprocess.CompletedProcess:
    """`python <args>` in the checkout, with no DJANGO_/STUDIO_ setting, no
    DATABASE_URL nor REDIS_URL of its own but `env`, reading `env_file`."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "STUDIO_")) and k not in ("DATABASE_URL", "REDIS_URL")
    }
    base |= {"STUDIO_ENV_FILE": str(env_file), **env}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60
    )


def test_the_file_sets_what_the_environment_lacks_and_leaves_the_rest(tmp_path, monkeypatch):
    path = tmp_path / ".env"
    path.write_text("STUDIO_TRIAL_A=from-the-file\nSTUDIO_TRIAL_B=from-the-file\n")
    monkeypatch.delenv("STUDIO_TRIAL_A", raising=False)
    monkeypatch.setenv("STUDIO_TRIAL_B", "from-the-environment")

    loaded = env_file_load(path)

    assert loaded == ["STUDIO_TRIAL_A"]
    assert os.environ["STUDIO_TRIAL_A"] == "from-the-file"
    assert os.environ["STUDIO_TRIAL_B"] == "from-the-environment"
    monkeypatch.delenv("STUDIO_TRIAL_A")


def test_comments_blank_lines_export_and_quotes_are_read_as_a_shell_would(tmp_path):
    path = tmp_path / ".env"
    path.write_text(
        "# a comment\n"
        "\n"
        "PLAIN=postgres://studio@db:5432/studio\n"
        "export EXPORTED=1\n"
        "  SPACED = 2  \n"
        'DOUBLE="a value with spaces"\n'
        "SINGLE='k#y$with&signs'\n"
        "EMPTY=\n"
        "HASH=abc#def\n"
    )

    assert env_file_read(path) == {
        "PLAIN": "postgres://studio@db:5432/studio",
        "EXPORTED": "1",
        "SPACED": "2",
        "DOUBLE": "a value with spaces",
        "SINGLE": "k#y$with&signs",
        "EMPTY": "",
        "HASH": "abc#def",
    }


def test_a_name_given_twice_takes_its_last_value_so_settings_can_be_appended(tmp_path):
    path = tmp_path / ".env"
    path.write_text(
        "REDIS_URL=redis://127.0.0.1:6379/0\nDJANGO_DEBUG=false\nREDIS_URL=redis://cache:6379/2\n"
    )

    assert env_file_read(path)["REDIS_URL"] == "redis://cache:6379/2"


def test_a_line_that_is_not_a_setting_stops_the_start_naming_the_file_and_line(tmp_path):
    path = tmp_path / ".env"
    path.write_text("DJANGO_DEBUG=false\nthis is not a setting\n")

    with pytest.raises(ImproperlyConfigured, match=r"\.env, line 2, is not a setting"):
        env_file_read(path)


def test_no_file_is_no_settings(tmp_path):
    assert env_file_read(tmp_path / "absent") == {}


def test_the_file_is_env_at_the_project_root_unless_studio_env_file_names_another(tmp_path, monkeypatch):
    monkeypatch.delenv("STUDIO_ENV_FILE", raising=False)
    assert env_file_path(ROOT) == ROOT / ".env"

    monkeypatch.setenv("STUDIO_ENV_FILE", str(tmp_path / "studio.env"))
    assert env_file_path(ROOT) == tmp_path / "studio.env"


@pytest.mark.django_db(transaction=True)  # no transaction left open: SQLite's would lock the file
def test_manage_py_migrates_on_what_the_file_says(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(
        f"DJANGO_SECRET_KEY={secrets.token_urlsafe(50)}\nDATABASE_URL={database_url_of_this_test_run()}\n"
    )

    # --check: exits 1 on a database with migrations to apply (SQLite's
    # db.sqlite3, were the file not read), 0 on the test run's, migrated.
    completed = run_python("manage.py", "migrate", "--check", env_file=env_file)

    assert completed.returncode == 0, completed.stderr


def test_the_real_environment_wins_over_the_file(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(f"DJANGO_SECRET_KEY={secrets.token_urlsafe(50)}\nSTUDIO_SEND_RATE=fast\n")

    completed = run_python("manage.py", "check", env_file=env_file, STUDIO_SEND_RATE="30/min")

    assert completed.returncode == 0, completed.stderr


def test_celery_reads_the_file_too(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(f"DJANGO_SECRET_KEY={secrets.token_urlsafe(50)}\nSTUDIO_CELERY_QUEUE=from-the-file\n")

    completed = run_python(
        "-c", "from studio.celery import app; print(app.conf.task_default_queue)", env_file=env_file
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "from-the-file"
