"""Static files: hashed, compressed and cached for good once collected;
served by their plain names before collectstatic has run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]
ONE_YEAR = 365 * 24 * 3600
# collectstatic runs in a process of its own.
pytestmark = pytest.mark.processes

COLLECTSTATIC_INTO = """
import sys, django
from django.conf import settings
settings.STATIC_ROOT = sys.argv[1]
django.setup()
from django.core.management import call_command
call_command("collectstatic", "--noinput", verbosity=0)
"""


def collectstatic(static_root: Path) -> dict:
    """collectstatic into `static_root`, as a deployment runs it; returns the
    manifest's paths (plain name -> hashed name)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "studio.settings"}
    subprocess.run(
        [sys.executable, "-c", COLLECTSTATIC_INTO, str(static_root)], cwd=ROOT, env=env, check=True
    )
    return json.loads((static_root / "staticfiles.json").read_text())["paths"]


def max_age(response) -> int:
    directives = dict(
        part.strip().partition("=")[::2] for part in response.headers.get("Cache-Control", "").split(",")
    )
    return int(directives.get("max-age") or 0)


def test_collected_static_files_are_linked_by_hash_compressed_and_cached_for_good(settings, tmp_path):
    paths = collectstatic(tmp_path)
    hashed_css, hashed_js = paths["studio.css"], paths["studio.js"]
    assert hashed_css != "studio.css" and (tmp_path / f"{hashed_css}.gz").exists()

    settings.STATIC_ROOT = tmp_path
    client = Client()
    page = client.get("/studio/login/").content.decode()
    assert f'href="/static/{hashed_css}"' in page
    assert f'src="/static/{hashed_js}"' in page

    response = client.get(f"/static/{hashed_css}", HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response.headers["Content-Encoding"] == "gzip"
    assert max_age(response) >= ONE_YEAR
    assert "immutable" in response.headers["Cache-Control"]


def test_before_collectstatic_pages_link_plain_names_served_from_the_apps(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "never-collected"
    client = Client()

    page = client.get("/studio/login/").content.decode()
    assert 'href="/static/studio.css"' in page

    response = client.get("/static/studio.css")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == (ROOT / "static" / "studio.css").read_bytes()
    assert max_age(response) < ONE_YEAR


def test_favicon_ico_is_the_studios_icon_not_a_404(db):
    response = Client().get("/favicon.ico", follow=True)

    assert response.status_code == 200
    assert response.redirect_chain[0][0].endswith("favicon.ico")
    assert b"".join(response.streaming_content)[:4] == b"\x00\x00\x01\x00"  # an icon file


def test_every_page_links_its_icon(db):
    for url in ("/", "/studio/login/"):
        html = Client().get(url).content.decode()
        assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in html, url
