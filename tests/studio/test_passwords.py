"""Passwords set through Django's checks (`validate_password`: the admin's
forms, `changepassword`, interactive `createsuperuser`) must be long, not
common, not all digits and not like the user's own name or email."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import call_command

from studio.management.commands.seed_demo import PASSWORD, USERNAME
from tests.support.signin import signin_windows_clear


@pytest.mark.parametrize(
    ("password", "says"),
    [
        ("short-1", "too short"),
        ("password123", "too common"),
        ("80412957316", "entirely numeric"),
        ("ines.navarro", "too similar to the username"),
    ],
)
def test_a_weak_password_is_refused_saying_why(db, password, says):
    user = get_user_model()(username="ines.navarro", email="ines@example.com")

    with pytest.raises(ValidationError) as refused:
        validate_password(password, user)

    assert any(says in message for message in refused.value.messages)


def test_a_good_password_is_accepted(db):
    user = get_user_model()(username="ines.navarro", email="ines@example.com")

    validate_password("tide-lantern-ferryman", user)


@pytest.mark.django_db(transaction=True)
def test_the_demo_login_that_make_run_prints_passes_the_checks_and_signs_in(client, settings, tmp_path):
    settings.DEBUG = True  # as make run has it: seed_demo runs only then
    call_command("seed_demo", key_file=str(tmp_path / ".demo-key"), stdout=StringIO())
    signin_windows_clear(username=USERNAME, address="127.0.0.1")
    demo = get_user_model().objects.get(username=USERNAME)

    validate_password(PASSWORD, demo)
    response = client.post("/studio/login/", {"username": USERNAME, "password": PASSWORD})

    assert response.status_code == 302
