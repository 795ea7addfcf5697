"""A web process started as the unit and the Procfile start it logs each
request once: the studio's access line (with the request id), never
Daphne's own beside it."""

import urllib.request

import pytest

from tests.support.deploy import daphne_options
from tests.support.web import start_web, stop_web

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_a_request_is_logged_once(tmp_path):
    [server], [url] = start_web(tmp_path, 1, options=daphne_options())
    try:
        request = urllib.request.Request(url + "/healthz", headers={"X-Request-ID": "logged-once-1"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
    finally:
        stop_web([server])

    lines = [line for line in server.log.read_text().splitlines() if "/healthz" in line]
    assert len(lines) == 1, lines
    assert "logged-once-1" in lines[0]
