"""Signing in, and the games a user may see."""

import re

import pytest
from playwright.sync_api import expect

from .conftest import sign_in_with_the_form

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_member_signs_in_and_sees_their_games(page, member, other_game):
    sign_in_with_the_form(page, member)

    expect(page.get_by_role("heading", name="Your games")).to_be_visible()
    expect(page.locator("[data-game=ashmere]")).to_be_visible()
    expect(page.locator("[data-game=elsewhere]")).to_have_count(0)


def test_a_wrong_password_is_told_so(page, member):
    page.goto("/studio/login/")
    page.get_by_label("Username").fill("mara")
    page.get_by_label("Password").fill("not it")
    page.get_by_role("button", name="Sign in").click()

    expect(page.get_by_role("alert")).to_contain_text("enter a correct username and password")


def test_another_games_pages_are_404(signed_in, other_game):
    response = signed_in.goto("/studio/elsewhere/agents/")

    assert response.status == 404


def test_pages_need_a_signed_in_user(page, game):
    page.goto("/studio/ashmere/agents/")

    expect(page).to_have_url(re.compile(r"/studio/login/\?next=/studio/ashmere/agents/$"))
