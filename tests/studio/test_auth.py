"""Who is calling: `Authorization: Bearer <api key>`, and what its role may do."""

import pytest
from django.utils import timezone

from agents.models import Agent
from billing import ledger
from studio.models import ApiKey
from tests.conftest import client_for, error_of

AGENTS = "/api/v1/agents"


def test_a_request_without_a_key_is_401_with_a_bearer_challenge(anonymous):
    response = anonymous.get(AGENTS)

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"
    assert "Bearer" in error_of(response)["message"]
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    [
        "Token {key}",
        "Basic {key}",
        "{key}",
        "Bearer",
        "Bearer ",
    ],
)
def test_a_key_sent_the_wrong_way_is_401(admin_key, header):
    client = client_for(None)
    client.credentials(HTTP_AUTHORIZATION=header.format(key=admin_key))

    response = client.get(AGENTS)

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_the_bearer_scheme_is_case_insensitive(admin_key):
    client = client_for(None)
    client.credentials(HTTP_AUTHORIZATION=f"bearer {admin_key}")

    response = client.get(AGENTS)

    assert response.status_code == 200


@pytest.mark.parametrize(
    "garbage",
    ["nonsense", "sk_", "sk_abcdef", "sk_abcdef_", "sk_000000000000_not-the-secret"],
)
def test_a_garbage_key_is_401(db, garbage):
    response = client_for(garbage).get(AGENTS)

    assert response.status_code == 401
    assert response.json() == {"error": {"code": "unauthenticated", "message": "This API key is not valid."}}


def test_a_real_prefix_with_the_wrong_secret_is_401(admin_key):
    forged = admin_key[:-1] + ("A" if admin_key[-1] != "A" else "B")

    response = client_for(forged).get(AGENTS)

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"


def test_a_revoked_key_stops_working(api, designer_key):
    assert api.get(AGENTS).status_code == 200
    key = ApiKey.objects.get(prefix=designer_key.split("_")[1])
    key.revoked_at = timezone.now()
    key.save()

    response = api.get(AGENTS)

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"


def test_keys_are_stored_only_as_a_digest(admin_key, designer_key):
    for text in (admin_key, designer_key):
        secret = text.split("_", 2)[2]
        row = ApiKey.objects.filter(prefix=text.split("_")[1]).values().get()

        stored = " ".join(str(value) for value in row.values())

        assert text not in stored
        assert secret not in stored
        assert len(row["digest"]) == 64


# --- roles ---------------------------------------------------------------------------


def test_a_designer_key_cannot_delete_an_agent(api, agent):
    response = api.delete("/api/v1/agents/dm")

    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"
    assert "admin" in error_of(response)["message"]
    assert Agent.objects.filter(pk=agent.pk).exists()


def test_an_admin_key_can_delete_an_agent(admin_api, agent):
    response = admin_api.delete("/api/v1/agents/dm")

    assert response.status_code == 204
    assert not Agent.objects.filter(pk=agent.pk).exists()


@pytest.mark.parametrize("client", ["api", "admin_api"])
def test_no_key_adjusts_the_budget_not_even_an_admin_key(request, game, client):
    response = request.getfixturevalue(client).post(
        "/api/v1/billing/adjustments", {"amount": "250.000000", "reason": "top up"}, format="json"
    )

    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"
    assert ledger.balance(game) == 100


def test_a_designer_key_cannot_set_the_monthly_cap(api, game):
    response = api.put("/api/v1/billing/limits", {"monthlyCap": "5.000000"}, format="json")

    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"


def test_an_admin_key_can_set_the_monthly_cap(admin_api, game):
    response = admin_api.put("/api/v1/billing/limits", {"monthlyCap": "5.000000"}, format="json")

    assert response.status_code == 200
    assert ledger.account_summary(game)["monthlyCap"] == "5.000000"


def test_a_designer_key_defines_sends_and_reads(api):
    defined = api.put("/api/v1/agents/dm", {"systemPrompt": "Hi"}, format="json")
    sent = api.post("/api/v1/agents/dm/messages", {"content": "Hello"}, format="json")
    read = api.get("/api/v1/agents/dm/history")

    assert (defined.status_code, sent.status_code, read.status_code) == (201, 200, 200)


def test_a_key_sees_nothing_of_another_game(outsider, agent):
    listed = outsider.get(AGENTS)
    fetched = outsider.get("/api/v1/agents/dm")

    assert listed.json() == {"agents": [], "nextCursor": None}
    assert fetched.status_code == 404
