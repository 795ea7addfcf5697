"""Sign-in is throttled: failed sign-ins are counted per username and per
client address (in Redis, shared by every process); past the limit the
sign-in forms (the studio's and the admin's) answer 429 with Retry-After,
without checking the password. A successful sign-in clears the username."""

import threading
import uuid

import pytest
from django.contrib.auth import SESSION_KEY, get_user_model
from django.test import Client

from studio.signin import signin_attempt_start, signin_windows_clear

PASSWORD = "a-password-for-the-sign-in-tests"
STUDIO_LOGIN, ADMIN_LOGIN = "/studio/login/", "/admin/login/"


@pytest.fixture
def address():
    """A client address of this test's own, with nothing counted yet."""
    address = f"198.51.100.{uuid.uuid4().int % 250 + 1}"
    signin_windows_clear(address=address)
    yield address
    signin_windows_clear(address=address)


@pytest.fixture
def mara(db):
    user = get_user_model().objects.create_user("mara", password=PASSWORD, is_staff=True)
    signin_windows_clear(username="mara")
    yield user
    signin_windows_clear(username="mara")


def other_address(address: str) -> str:
    """Another client's address, with nothing counted yet."""
    other = address.replace("198.51.100.", "192.0.2.")
    signin_windows_clear(address=other)
    return other


def sign_in(client: Client, address: str, password: str, *, username="mara", path=STUDIO_LOGIN, **headers):
    return client.post(
        path, {"username": username, "password": password}, REMOTE_ADDR=address, headers=headers
    )


def test_a_username_is_refused_after_five_failed_sign_ins_without_checking_the_password(
    client, mara, address
):
    failed = [sign_in(client, address, "wrong") for _ in range(5)]
    refused = sign_in(client, address, PASSWORD)

    assert [r.status_code for r in failed] == [200] * 5
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 15 * 60
    assert "Too many failed sign-ins" in refused.content.decode()
    assert SESSION_KEY not in client.session


def test_the_admin_sign_in_counts_toward_the_same_limit_and_is_refused_too(client, mara, address):
    for path in (STUDIO_LOGIN, ADMIN_LOGIN) * 2 + (ADMIN_LOGIN,):
        assert sign_in(client, address, "wrong", path=path).status_code == 200

    assert sign_in(client, address, PASSWORD, path=ADMIN_LOGIN).status_code == 429
    assert sign_in(client, address, PASSWORD, path=STUDIO_LOGIN).status_code == 429


def test_an_address_is_refused_after_its_failed_sign_ins_across_usernames(client, mara, address, studio_conf):
    studio_conf(SIGNIN_FAILURES_PER_ADDRESS=4)
    for _ in range(4):
        assert sign_in(client, address, "wrong", username=f"guess-{uuid.uuid4().hex}").status_code == 200

    refused = sign_in(client, address, PASSWORD)
    elsewhere = sign_in(Client(), other_address(address), PASSWORD)

    assert (refused.status_code, elsewhere.status_code) == (429, 302)


def test_a_successful_sign_in_clears_the_usernames_failures(client, mara, address):
    for _ in range(4):
        assert sign_in(client, address, "wrong").status_code == 200
    assert sign_in(client, address, PASSWORD).status_code == 302

    again = [sign_in(Client(), address, "wrong").status_code for _ in range(5)]

    assert again == [200] * 5
    assert sign_in(Client(), address, PASSWORD).status_code == 429


def test_behind_the_proxy_the_address_is_the_one_the_proxy_saw(client, mara, address, settings, studio_conf):
    """The proxy (REMOTE_ADDR) appends the address it saw to
    X-Forwarded-For; the entries before it are the client's to forge."""
    settings.SECURE_PROXY = True
    studio_conf(SIGNIN_FAILURES_PER_ADDRESS=2)
    proxy = "10.0.0.1"
    for forged in ("203.0.113.1", "203.0.113.2"):
        guess = f"guess-{uuid.uuid4().hex}"
        assert (
            sign_in(
                client, proxy, "wrong", username=guess, x_forwarded_for=f"{forged}, {address}"
            ).status_code
            == 200
        )

    refused = sign_in(client, proxy, PASSWORD, x_forwarded_for=f"203.0.113.3, {address}")
    another_client = sign_in(Client(), proxy, PASSWORD, x_forwarded_for=other_address(address))

    assert (refused.status_code, another_client.status_code) == (429, 302)


def test_the_username_limit_holds_exactly_under_concurrent_attempts():
    """Twenty attempts on one username at once: exactly five are let
    through to the password check — each takes its place in one atomic step."""
    username = f"burst-{uuid.uuid4().hex[:8]}"
    addresses = [f"2001:db8::{uuid.uuid4().hex[:4]}" for _ in range(20)]
    start = threading.Barrier(20)
    let_through = []

    def attempt(from_address):
        start.wait()
        let_through.append(signin_attempt_start(username=username, address=from_address).wait is None)

    threads = [threading.Thread(target=attempt, args=(a,)) for a in addresses]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert let_through.count(True) == 5
