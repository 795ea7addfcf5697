"""Behind a proxy that terminates TLS (DJANGO_SECURE_PROXY=1): page POSTs
that came in as HTTPS pass CSRF, plain HTTP is redirected without loops,
and the proxy's probes are not. Each test loads the settings module afresh
under its environment and applies what it says about HTTPS and origins."""

import runpy

import pytest
from django.conf import global_settings
from django.contrib.auth import get_user_model
from django.test import Client

from tests.support.settings import SETTINGS_FILE

PASSWORD = "a-password-for-the-proxy-tests"
APPLIED = (
    "ALLOWED_HOSTS",
    "CSRF_TRUSTED_ORIGINS",
    "SECURE_PROXY_SSL_HEADER",
    "SECURE_SSL_REDIRECT",
    "SECURE_REDIRECT_EXEMPT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
)


@pytest.fixture
def mara(db):
    return get_user_model().objects.create_user("mara", password=PASSWORD)


@pytest.fixture
def studio_under(settings, monkeypatch):
    """studio_under(**env): a client of the studio as the settings module
    configures it under `env` (a host, a proxy's address, DEBUG off)."""

    def _client(**env: str) -> Client:
        for name in (
            "DJANGO_DEBUG",
            "DJANGO_SECURE_PROXY",
            "DJANGO_CSRF_TRUSTED_ORIGINS",
            "DJANGO_HSTS_SECONDS",
        ):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("DJANGO_ALLOWED_HOSTS", "studio.example.com,studio.internal")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        conf = runpy.run_path(str(SETTINGS_FILE))
        for name in APPLIED:
            setattr(settings, name, conf.get(name, getattr(global_settings, name)))
        # A new client loads the middleware afresh, with these settings.
        return Client(enforce_csrf_checks=True)

    return _client


def sign_in(client: Client, *, origin: str, host: str = "studio.example.com"):
    """The sign-in form, fetched and posted through the proxy over HTTPS."""
    headers = {"host": host, "x-forwarded-proto": "https"}
    assert client.get("/studio/login/", headers=headers).status_code == 200
    form = {
        "username": "mara",
        "password": PASSWORD,
        "csrfmiddlewaretoken": client.cookies["csrftoken"].value,
    }
    return client.post("/studio/login/", form, headers={**headers, "origin": origin})


def test_behind_the_proxy_a_page_post_that_came_in_as_https_passes_csrf(studio_under, mara):
    client = studio_under(DJANGO_SECURE_PROXY="1")

    response = sign_in(client, origin="https://studio.example.com")

    assert response.status_code == 302
    assert response.cookies["sessionid"]["secure"] is True


def test_without_the_proxy_setting_the_same_post_fails_csrf(studio_under, mara):
    client = studio_under()

    assert sign_in(client, origin="https://studio.example.com").status_code == 403


def test_a_post_from_the_public_origin_to_the_proxys_upstream_host_passes_only_when_that_origin_is_trusted(
    studio_under, mara
):
    trusting = studio_under(DJANGO_SECURE_PROXY="1", DJANGO_CSRF_TRUSTED_ORIGINS="https://studio.example.com")
    assert sign_in(trusting, origin="https://studio.example.com", host="studio.internal").status_code == 302

    untrusting = studio_under(DJANGO_SECURE_PROXY="1")
    assert sign_in(untrusting, origin="https://studio.example.com", host="studio.internal").status_code == 403


def test_behind_the_proxy_plain_http_is_redirected_once_and_probes_are_not(studio_under, db):
    client = studio_under(DJANGO_SECURE_PROXY="1")

    plain = client.get("/studio/login/", headers={"host": "studio.example.com"})
    through_proxy = client.get(
        "/studio/login/", headers={"host": "studio.example.com", "x-forwarded-proto": "https"}
    )

    assert plain.status_code == 301
    assert plain["Location"] == "https://studio.example.com/studio/login/"
    assert through_proxy.status_code == 200
    assert through_proxy["Strict-Transport-Security"] == "max-age=31536000"
    for probe in ("/healthz", "/readyz", "/metrics"):
        assert client.get(probe, headers={"host": "studio.example.com"}).status_code != 301
