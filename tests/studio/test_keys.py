"""Keys an operator can look after: when each was last used (recorded at
most once every few minutes, never a write per request), listed by
`manage.py listkeys` and in the admin, and revoked by `manage.py revokekey`."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from studio.auth.keys import LAST_USE_STEP, apikey_create
from studio.models import ApiKey, Role
from tests.conftest import client_for

AGENTS = "/api/v1/agents"


def key_row(text: str) -> ApiKey:
    return ApiKey.objects.get(prefix=text.removeprefix("sk_").partition("_")[0])


def run(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


# --- last use ---------------------------------------------------------------------------


def test_a_key_is_never_used_until_a_request_carries_it(designer_key):
    assert key_row(designer_key).last_used_at is None

    before = timezone.now()
    client_for(designer_key).get(AGENTS)

    assert key_row(designer_key).last_used_at >= before


def test_requests_within_a_few_minutes_of_the_last_use_write_nothing(designer_key):
    client = client_for(designer_key)
    client.get(AGENTS)
    recorded = key_row(designer_key).last_used_at

    with CaptureQueriesContext(connection) as captured:
        for _ in range(3):
            assert client.get(AGENTS).status_code == 200

    writes = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("UPDATE")]
    assert writes == []
    assert key_row(designer_key).last_used_at == recorded


def test_a_request_once_the_last_use_is_older_than_the_step_records_it_again(designer_key):
    stale = timezone.now() - LAST_USE_STEP - timedelta(seconds=1)
    ApiKey.objects.filter(pk=key_row(designer_key).pk).update(last_used_at=stale)

    client_for(designer_key).get(AGENTS)

    assert key_row(designer_key).last_used_at > stale + LAST_USE_STEP


def test_a_refused_key_records_no_use(designer_key):
    prefix = key_row(designer_key).prefix

    client_for(f"sk_{prefix}_not-the-secret").get(AGENTS)

    assert key_row(designer_key).last_used_at is None


def test_the_admin_lists_each_keys_last_use(admin_client, designer_key):
    client_for(designer_key).get(AGENTS)

    page = admin_client.get("/admin/studio/apikey/").content.decode()

    assert "Last used" in page
    assert key_row(designer_key).prefix in page


# --- listkeys -----------------------------------------------------------------------------


def test_listkeys_shows_each_keys_role_label_and_last_use(game, designer_key):
    client_for(designer_key).get(AGENTS)
    unused, _ = apikey_create(game=game, role=Role.DESIGNER, label="build server")
    used = key_row(designer_key)

    out, _ = run("listkeys", game.slug)

    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert used.last_used_at.strftime("%Y-%m-%d %H:%M") in lines[used.prefix]
    assert "never" in lines[unused.prefix] and "build server" in lines[unused.prefix]
    assert out.splitlines()[0].split()[:3] == ["PREFIX", "ROLE", "CREATED"]


def test_listkeys_marks_revoked_keys(game, designer_key):
    run("revokekey", key_row(designer_key).prefix)

    out, _ = run("listkeys", game.slug)

    assert "revoked" in next(
        line for line in out.splitlines() if line.startswith(key_row(designer_key).prefix)
    )


def test_listkeys_refuses_an_unknown_game(db):
    with pytest.raises(CommandError, match="no game 'nowhere'"):
        run("listkeys", "nowhere")


# --- revokekey ----------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["prefix", "sk_prefix", "whole key"])
def test_revokekey_stops_the_key_working_and_prints_its_row(designer_key, admin_key, given):
    prefix = key_row(designer_key).prefix
    argument = {"prefix": prefix, "sk_prefix": f"sk_{prefix}", "whole key": designer_key}[given]

    out, _ = run("revokekey", argument)

    assert client_for(designer_key).get(AGENTS).status_code == 401
    assert client_for(admin_key).get(AGENTS).status_code == 200
    assert prefix in out and "revoked" in out
    assert key_row(designer_key).revoked_at is not None


def test_revokekey_again_leaves_the_first_revocation(designer_key):
    run("revokekey", key_row(designer_key).prefix)
    first = key_row(designer_key).revoked_at

    _, err = run("revokekey", key_row(designer_key).prefix)

    assert "already revoked" in err
    assert key_row(designer_key).revoked_at == first


def test_revokekey_refuses_an_unknown_prefix(db):
    with pytest.raises(CommandError, match="No API key has the prefix 'abcdef012345'"):
        run("revokekey", "abcdef012345")
