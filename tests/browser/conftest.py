"""Browser tests: real Chromium (Debian's headless shell, driven by
Playwright) against a real studio server — Daphne's runserver in a
subprocess, on the test database and this machine's Redis — so pages,
WebSockets and live events are the ones users get.

These run in a pytest run of their own (`make test` starts it beside the
rest): Playwright's sync API keeps an event loop in the main thread, which
does not mix with the asyncio tests. Screenshots of every test land in
test-artifacts/.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.test import Client

from studio.models import Membership
from tests.support import time_story
from tests.support.database import database_url_of_this_test_run

# Playwright's sync API runs an event loop in this thread; Django would
# otherwise refuse the tests' own database calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# How long a click, a navigation or an `expect` waits for its state: only a
# hang takes this long, however loaded the machine (one passes as soon as
# its state is reached). Playwright's own are 30 s for actions, 5 s for
# `expect`; a loaded machine has taken more than 10 s to make a button
# clickable.
WAIT_MS = 60_000

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
# Chromium's headless shell (Debian's chromium-headless-shell, the same
# version as its chromium): a build for headless use, which spends about half
# the CPU of the full browser on these tests. STUDIO_CHROMIUM=/usr/bin/chromium
# runs them on the full one.
CHROMIUM = os.environ.get("STUDIO_CHROMIUM", "/usr/bin/chromium-headless-shell")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "pw-for-the-browser-tests"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def studio_server(django_db_setup, tmp_path_factory):
    """A studio server process on the test database; yields its base URL."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_this_test_run(),
        "REDIS_URL": settings.REDIS_URL,
        "STUDIO_CHANNEL_PREFIX": settings.CHANNEL_PREFIX,
        "DJANGO_DEBUG": "true",
        "STUDIO_COMPACTION_RUNNER": "inline",
    }
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 120  # a loaded machine starts it slowly; only a hang takes this
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("the studio server exited: " + log_path.read_text()[-3000:]) from None
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, studio_server, request):
    context = browser.new_context(base_url=studio_server, viewport={"width": 1366, "height": 900})
    context.set_default_timeout(WAIT_MS)
    context.add_init_script(COUNT_REPLACED_PARTS)
    page = context.new_page()
    yield page
    ARTIFACTS.mkdir(exist_ok=True)
    name = request.node.name.replace("/", "_")[:120]
    try:
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    finally:
        context.close()


# Every page counts the live parts (data-live-fragment) it has replaced.
COUNT_REPLACED_PARTS = """
window.partsReplaced = 0;
document.addEventListener("studio:fragment", () => { window.partsReplaced += 1; });
"""


def settled(page) -> None:
    """Wait until the page has replaced each of its live parts once: a live
    page refetches them all when its socket opens, and a click on a link in
    a part that is being replaced can be lost."""
    page.wait_for_function("document.querySelectorAll('[data-live-fragment]').length <= window.partsReplaced")


@pytest.fixture(autouse=True)
def fast_password_hasher():
    """The real hashers here (the root conftest's fast one is for the rest):
    the users below have PASSWORD hashed as the studio hashes it, and the
    tests of the sign-in form check it on a server whose settings are the
    studio's own."""


@pytest.fixture(scope="session")
def password_hash() -> str:
    """PASSWORD hashed once for the run, by the studio's own hasher: made
    for each user, it would cost about as much as the test."""
    return make_password(PASSWORD)


def studio_member(username: str, game, role: str, password_hash: str, *, is_staff: bool = False):
    """A studio user of `game` in `role`, whose password is PASSWORD."""
    user = get_user_model().objects.create(username=username, password=password_hash, is_staff=is_staff)
    Membership.objects.create(user=user, game=game, role=role)
    return user


@pytest.fixture
def member(game, password_hash):
    """A studio user who is a designer of the test game."""
    return studio_member("mara", game, "designer", password_hash)


@pytest.fixture
def admin_member(game, password_hash):
    return studio_member("ines", game, "admin", password_hash)


@pytest.fixture
def staff_member(game, password_hash):
    """A staff user (an operator of the studio) who is a designer of the test
    game: who adjusts credits and raises or removes caps."""
    return studio_member("sam", game, "designer", password_hash, is_staff=True)


def sign_in_with_the_form(page, user) -> None:
    """Sign in as a user does: the form, then the games list."""
    page.goto("/studio/login/")
    page.get_by_label("Username").fill(user.get_username())
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/studio/")


def sign_in(page, user) -> None:
    """Signed in as `user` without the form (its own tests go through it):
    a session made here, on the database the server reads, and its cookie
    handed to the browser. The next page the test opens is signed in."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies(
        [{"name": cookie.key, "value": cookie.value, "domain": "127.0.0.1", "path": "/"}]
    )


@pytest.fixture
def signed_in(page, member):
    sign_in(page, member)
    return page


@pytest.fixture
def lived(api, agent, studio_conf):
    """dm, with the nine blocks of tests/support/time_story.py behind it:
    memories written, rewritten and deleted, a compaction and a forced
    checkpoint. Returns its turns."""
    return time_story.play(api, studio_conf)


def tab_to(page, locator, most: int = 80) -> None:
    """Press Tab until `locator` has the focus: it is reachable by keyboard."""
    for _ in range(most):
        if locator.evaluate("(element) => element === document.activeElement"):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"{locator} was not reached in {most} presses of Tab")
