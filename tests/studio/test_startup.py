"""The studio refuses to start on settings it cannot run safely: each case
runs `manage.py check` in a process of its own, with the environment under
test, and expects it to stop before anything runs, naming the variable."""

import re
import runpy
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import signing

from tests.support.commands import manage

# Most of these run manage.py in a process of its own.
pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def refusal(completed: subprocess.CompletedProcess) -> str:
    """The ImproperlyConfigured sentence a refused start ended with."""
    assert completed.returncode != 0, completed.stdout
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: "), completed.stderr
    return last.removeprefix("django.core.exceptions.ImproperlyConfigured: ")


def test_the_studio_starts_with_debug_off_on_a_strong_key():
    completed = manage("check")

    assert completed.returncode == 0, completed.stderr


@pytest.mark.parametrize(
    ("key", "says"),
    [
        (None, "is not set"),
        ("", "is not set"),
        ("django-insecure-studio-development-key", "is a development key"),
        ("django-insecure-" + "x7Gq2" * 10, "is a development key"),
        ("x7Gq2" * 9, "is 45 characters long"),
        ("ab" * 30, "has 2 distinct characters"),
    ],
)
def test_with_debug_off_a_missing_development_or_weak_secret_key_stops_the_start(key, says):
    message = refusal(manage("check", DJANGO_SECRET_KEY=key))

    assert message.startswith("DJANGO_SECRET_KEY ")
    assert says in message


def test_with_debug_on_the_development_key_is_allowed():
    completed = manage("check", DJANGO_DEBUG="true", DJANGO_SECRET_KEY=None)

    assert completed.returncode == 0, completed.stderr


def test_the_studio_starts_on_good_studio_settings():
    completed = manage(
        "check", STUDIO_SEND_RATE="30/min", STUDIO_COMPACTION_SOFT_RATIO="0.8", STUDIO_DB_POOL="on"
    )

    assert completed.returncode == 0, completed.stderr


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("STUDIO_SEND_RATE", "fast", "a count above 0 per s, min, hour or day"),
        ("STUDIO_MAX_QUEUED_SENDS", "-1", "a whole number of at least 0"),
        ("STUDIO_STORE_CAP_BYTES", "1MB", "a whole number of at least 1"),
        ("STUDIO_COMPACTION_SOFT_RATIO", "2", "a number above 0 and at most 1"),
        ("STUDIO_COMPACTION_RUNNER", "cron", "one of celery, thread, inline, none"),
        ("STUDIO_ALLOW_SCRIPTED_MODEL", "maybe", "1, true, yes or on, or 0, false, no or off"),
        ("STUDIO_DEFAULT_MODEL", "gpt-4o", "scripted, openai:<model> or anthropic:<model>"),
    ],
)
def test_a_bad_studio_setting_stops_the_start_naming_the_variable_and_what_it_accepts(variable, value, says):
    message = refusal(manage("check", **{variable: value}))

    assert message.startswith(f"{variable} must be ")
    assert says in message
    assert f"not '{value}'" in message


def test_celery_compactions_without_redis_stop_the_start():
    message = refusal(manage("check", STUDIO_COMPACTION_RUNNER="celery", REDIS_URL=None))

    assert message.startswith("STUDIO_COMPACTION_RUNNER=celery needs REDIS_URL")


def test_without_redis_compactions_run_in_a_thread_and_the_studio_starts():
    completed = manage("check", REDIS_URL=None)

    assert completed.returncode == 0, completed.stderr


# --- the key an operator generates, and keys being rotated out -------------------------

GENERATOR = re.compile(r"""python3? -c (['"])(import secrets.*?|from django.*?)\1""")
URL_SAFE = re.compile(r"[A-Za-z0-9_-]+")


def key_generators() -> dict[str, set[str]]:
    """Every command the guide, .env.example and the start-up refusal give
    for making a secret key, by file."""
    files = ["README.md", "docs/operating.md", ".env.example", "studio/settings.py"]
    return {name: {match[2] for match in GENERATOR.finditer((ROOT / name).read_text())} for name in files}


def test_every_key_generator_the_docs_give_makes_a_url_safe_key_the_studio_accepts():
    generators = key_generators()

    assert all(generators.values()), generators
    for code in set().union(*generators.values()):
        for _ in range(2):
            key = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
            # No #, $, & or quote: nothing an .env reader, a shell or a
            # Procfile runner would cut or expand.
            assert URL_SAFE.fullmatch(key), f"{code!r} made {key!r}"
            assert manage("check", DJANGO_SECRET_KEY=key).returncode == 0


def test_fallback_keys_are_read_as_a_comma_separated_list(monkeypatch):
    old, older = secrets.token_urlsafe(50), secrets.token_urlsafe(50)
    monkeypatch.setenv("DJANGO_SECRET_KEY_FALLBACKS", f" {old}, {older} ,")

    conf = runpy.run_path(str(ROOT / "studio" / "settings.py"))

    assert conf["SECRET_KEY_FALLBACKS"] == [old, older]


def test_without_fallback_keys_there_are_none(monkeypatch):
    monkeypatch.delenv("DJANGO_SECRET_KEY_FALLBACKS", raising=False)

    assert runpy.run_path(str(ROOT / "studio" / "settings.py"))["SECRET_KEY_FALLBACKS"] == []


@pytest.mark.parametrize(
    ("fallbacks", "says"),
    [
        ("django-insecure-studio-development-key", "key 1 is a development key"),
        (f"{'x7Gq2' * 12},short", "key 2 is 5 characters long"),
    ],
)
def test_with_debug_off_a_weak_fallback_key_stops_the_start(fallbacks, says):
    message = refusal(manage("check", DJANGO_SECRET_KEY_FALLBACKS=fallbacks))

    assert message.startswith("DJANGO_SECRET_KEY_FALLBACKS ")
    assert says in message
    assert "x7Gq2" not in message  # a key is never printed


def test_what_the_old_key_signed_still_verifies_after_a_rotation(settings, monkeypatch):
    old, new = secrets.token_urlsafe(50), secrets.token_urlsafe(50)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = old, []
    signed = signing.dumps({"session": "kept"})
    monkeypatch.setenv("DJANGO_SECRET_KEY", new)
    monkeypatch.setenv("DJANGO_SECRET_KEY_FALLBACKS", old)
    conf = runpy.run_path(str(ROOT / "studio" / "settings.py"))

    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = conf["SECRET_KEY"], conf["SECRET_KEY_FALLBACKS"]

    assert signing.loads(signed) == {"session": "kept"}
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(signing.BadSignature):
        signing.loads(signed)
