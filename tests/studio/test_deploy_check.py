"""`manage.py check --deploy` tells the truth: clean in the documented
production environment, and still warning where Django would."""

import re

import pytest
from django.conf import settings
from django.utils.module_loading import import_string

from tests.support.commands import manage
from tests.support.database import database_url_of_this_test_run

# manage.py runs in a process of its own.
pytestmark = pytest.mark.processes

DEPLOY_CHECK = ("check", "--deploy", "--fail-level", "WARNING")


def production(**env: str | None) -> dict:
    """The environment docs/operating.md documents for production (DEBUG off, a strong
    key, behind a TLS proxy, one host), on the test database; then `env`."""
    return {
        "DJANGO_SECURE_PROXY": "1",
        "DJANGO_ALLOWED_HOSTS": "studio.example.com",
        "DATABASE_URL": database_url_of_this_test_run(),
        **env,
    }


def warnings_of(output: str) -> set[str]:
    return set(re.findall(r"\((security\.W\d+)\)", output))


@pytest.mark.django_db
def test_the_deploy_check_is_clean_in_the_documented_production_environment():
    completed = manage(*DEPLOY_CHECK, **production())

    assert completed.returncode == 0, completed.stderr
    assert warnings_of(completed.stdout + completed.stderr) == set()
    assert "System check identified no issues" in completed.stdout


@pytest.mark.django_db
def test_without_the_proxy_setting_the_deploy_check_warns_of_http_and_plain_cookies():
    completed = manage(*DEPLOY_CHECK, **production(DJANGO_SECURE_PROXY=None))

    assert completed.returncode != 0
    # HSTS, the HTTPS redirect and the two cookies: Django's own checks,
    # which only run when they find Django's middleware in MIDDLEWARE.
    assert warnings_of(completed.stderr) == {
        "security.W004",
        "security.W008",
        "security.W012",
        "security.W016",
    }


@pytest.mark.django_db
def test_with_debug_on_the_deploy_check_warns_of_debug():
    completed = manage(*DEPLOY_CHECK, **production(DJANGO_DEBUG="true"))

    assert completed.returncode != 0
    assert warnings_of(completed.stderr) == {"security.W018"}


def test_djangos_middleware_is_listed_by_its_own_name_and_runs_sync_only():
    """Under ASGI the stack runs in one worker thread only if no middleware
    in it is async-capable (see studio/serving/middleware.py)."""
    for path in (
        "security.SecurityMiddleware",
        "csrf.CsrfViewMiddleware",
        "clickjacking.XFrameOptionsMiddleware",
    ):
        assert f"django.middleware.{path}" in settings.MIDDLEWARE
    async_capable = [
        path for path in settings.MIDDLEWARE if getattr(import_string(path), "async_capable", False)
    ]
    assert async_capable == []
