"""Sign-in is throttled: failed sign-ins are counted per username from one
client address, per address, and per username from every address (in Redis,
shared by every process); past a limit the sign-in forms (the studio's and
the admin's) answer 429 with Retry-After, without checking the password.
Nobody locks an account from one address. A successful sign-in clears its
username's failures from its address."""

import threading
import uuid

import pytest
from django.contrib.auth import SESSION_KEY, get_user_model
from django.test import Client

from studio.auth.signin import signin_attempt_start
from tests.support.signin import signin_windows_clear

PASSWORD = "a-password-for-the-sign-in-tests"
STUDIO_LOGIN, ADMIN_LOGIN = "/studio/login/", "/admin/login/"


@pytest.fixture
def address():
    """A client address of this test's own, with nothing counted yet."""
    address = f"198.51.100.{uuid.uuid4().int % 250 + 1}"
    signin_windows_clear(address=address, username="mara")
    yield address
    signin_windows_clear(address=address, username="mara")


@pytest.fixture
def mara(db):
    user = get_user_model().objects.create_user("mara", password=PASSWORD, is_staff=True)
    signin_windows_clear(username="mara")
    yield user
    signin_windows_clear(username="mara")


def other_address(address: str, number: int = 0) -> str:
    """Another client's address, with nothing counted yet (nor for mara)."""
    other = address.replace("198.51.100.", f"192.0.{2 + number}.")
    signin_windows_clear(address=other, username="mara")
    return other


def sign_in(client: Client, address: str, password: str, *, username="mara", path=STUDIO_LOGIN, **headers):
    return client.post(
        path, {"username": username, "password": password}, REMOTE_ADDR=address, headers=headers
    )


def test_an_address_is_refused_a_username_after_five_failed_sign_ins_without_checking_the_password(
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


@pytest.mark.parametrize("path", [STUDIO_LOGIN, ADMIN_LOGIN])
def test_failures_from_one_address_do_not_lock_the_account_for_another(client, mara, address, path):
    for _ in range(5):
        assert sign_in(client, address, "wrong", path=path).status_code == 200

    shut_out = sign_in(client, address, PASSWORD, path=path)
    owner = sign_in(Client(), other_address(address), PASSWORD, path=path)

    assert (shut_out.status_code, owner.status_code) == (429, 302)


def test_a_username_is_refused_everywhere_only_after_failures_from_many_addresses(
    client, mara, address, studio_conf
):
    studio_conf(SIGNIN_FAILURES_PER_USERNAME=6)
    elsewhere = [other_address(address, number) for number in range(3)]
    for _ in range(2):
        for other in elsewhere:
            assert sign_in(Client(), other, "wrong").status_code == 200

    refused = sign_in(client, address, PASSWORD)
    another_account = sign_in(client, address, PASSWORD, username="ines")

    assert refused.status_code == 429
    assert another_account.status_code == 200  # a wrong password, checked: ines is not locked


def test_a_successful_sign_in_clears_the_usernames_failures_from_its_address(client, mara, address):
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


# Spellings Django's sign-in form (UsernameField: stripped, NFKC) signs in as "mara".
MARA_SPELLINGS = ["ｍａｒａ", " mara ", "ᵐara"]


@pytest.mark.parametrize("spelling", MARA_SPELLINGS, ids=["fullwidth", "spaced", "modifier-m"])
def test_each_spelling_django_signs_in_as_the_account_is_that_account_at_the_sign_in(
    client, mara, address, spelling
):
    assert sign_in(client, address, PASSWORD, username=spelling).status_code == 302
    assert client.session[SESSION_KEY] == str(mara.pk)


@pytest.mark.parametrize("spelling", MARA_SPELLINGS, ids=["fullwidth", "spaced", "modifier-m"])
@pytest.mark.parametrize("path", [STUDIO_LOGIN, ADMIN_LOGIN])
def test_a_username_locked_is_locked_in_every_spelling_django_signs_in_as_it(
    client, mara, address, studio_conf, spelling, path
):
    studio_conf(SIGNIN_FAILURES_PER_USERNAME=3)
    elsewhere = [other_address(address, number) for number in range(3)]
    for other in elsewhere:
        assert sign_in(Client(), other, "wrong", path=path).status_code == 200

    refused = sign_in(client, address, PASSWORD, username=spelling, path=path)

    assert refused.status_code == 429
    assert SESSION_KEY not in client.session


def _let_through_at_once(username: str, addresses: list[str]) -> int:
    """How many of the attempts on `username`, one from each of `addresses`
    and all at once, are let through to the password check."""
    start = threading.Barrier(len(addresses))
    let_through = []

    def attempt(from_address):
        start.wait()
        let_through.append(signin_attempt_start(username=username, address=from_address).wait is None)

    threads = [threading.Thread(target=attempt, args=(a,)) for a in addresses]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return let_through.count(True)


def test_the_limit_per_username_and_address_holds_exactly_under_concurrent_attempts():
    """Twenty attempts on one username from one address at once: exactly
    five are let through — each takes its place in one atomic step."""
    address = f"2001:db8::{uuid.uuid4().hex[:4]}"

    assert _let_through_at_once(f"burst-{uuid.uuid4().hex[:8]}", [address] * 20) == 5


def test_the_limit_per_username_holds_exactly_under_concurrent_attempts_from_many_addresses(studio_conf):
    studio_conf(SIGNIN_FAILURES_PER_USERNAME=7)
    addresses = [f"2001:db8::{uuid.uuid4().hex[:4]}" for _ in range(20)]

    assert _let_through_at_once(f"burst-{uuid.uuid4().hex[:8]}", addresses) == 7
