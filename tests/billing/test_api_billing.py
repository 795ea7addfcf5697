"""GET /api/v1/billing, GET /api/v1/billing/lines, POST /api/v1/billing/adjustments."""

import re
import uuid
from decimal import Decimal

import pytest

from billing import ledger
from billing.models import Adjustment, CostLine
from tests.conftest import call, client_for, error_of, script

SIX_PLACES = re.compile(r"^-?\d+\.\d{6}$")
QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the silver key."}


def balance_of(client) -> Decimal:
    return Decimal(client.get("/api/v1/billing").json()["balance"])


def adjust(client, body):
    return client.post("/api/v1/billing/adjustments", body, format="json")


@pytest.fixture
def two_memory_calls(agent, send):
    """A turn with two memory tool calls, the second of them an error."""
    return send(script(call("close_memory", **QUEST), call("open_memory", name="inventory"), {"say": "Hm."}))


# --- balance and prices ------------------------------------------------------------------


def test_billing_shows_the_balance_and_the_prices(api, game):
    response = api.get("/api/v1/billing")

    assert response.status_code == 200
    body = response.json()
    assert body["balance"] == "100.000000"
    assert body["prices"]["memoryAccess"] == "0.001000"
    assert body["prices"]["models"]["scripted"] == {
        "inputPerMTok": "2.000000",
        "outputPerMTok": "8.000000",
        "cachedInputPerMTok": "0.500000",
    }


def test_billing_needs_a_key(anonymous):
    response = anonymous.get("/api/v1/billing")

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"


def test_each_game_sees_its_own_balance(api, outsider, game):
    ledger.adjustment_post(game=game, amount="5", reason="bonus", made_by="boss")

    assert balance_of(api) == Decimal("105")
    assert balance_of(outsider) == Decimal("100")


# --- what a turn costs -------------------------------------------------------------------


def test_memory_tool_calls_errors_included_make_one_memory_access_line(two_memory_calls):
    assert [c["isError"] for c in two_memory_calls["toolCalls"]] == [False, True]

    lines = {line["kind"]: line for line in two_memory_calls["cost"]["lines"]}

    assert len(two_memory_calls["cost"]["lines"]) == 2
    assert lines["memory_access"]["quantity"] == 2
    assert lines["memory_access"]["amount"] == "0.002000"
    assert lines["model"]["quantity"] > 0
    assert CostLine.objects.filter(turn_id=two_memory_calls["id"]).count() == 2


def test_the_model_line_counts_every_model_step_of_the_turn(two_memory_calls):
    line = CostLine.objects.get(turn_id=two_memory_calls["id"], kind="model")

    assert line.detail["calls"] == 3  # two tool calls, then the reply
    assert line.quantity == line.detail["inputTokens"] + line.detail["outputTokens"]
    assert ledger.credits_text(line.amount) == next(
        entry["amount"] for entry in two_memory_calls["cost"]["lines"] if entry["kind"] == "model"
    )


def test_the_balance_moves_by_exactly_the_turns_cost(api, agent, send):
    before = balance_of(api)

    turn = send(script(call("close_memory", **QUEST), call("open_memory", name="inventory"), {"say": "Hm."}))

    total = Decimal(turn["cost"]["total"])
    assert total == sum(Decimal(line["amount"]) for line in turn["cost"]["lines"])
    assert total > Decimal("0.002")
    assert balance_of(api) == before - total


def test_lines_for_a_turn_are_that_turns_lines_only(api, agent, send, two_memory_calls):
    send("Another turn")

    response = api.get(f"/api/v1/billing/lines?turn={two_memory_calls['id']}")

    assert response.status_code == 200
    lines = response.json()["lines"]
    assert {line["turnId"] for line in lines} == {two_memory_calls["id"]}
    assert sorted(
        (line["kind"], line["label"], line["quantity"], line["amount"]) for line in lines
    ) == sorted(
        (line["kind"], line["label"], line["quantity"], line["amount"])
        for line in two_memory_calls["cost"]["lines"]
    )
    assert all(line["agent"] == "dm" and SIX_PLACES.match(line["amount"]) for line in lines)


def test_lines_without_a_turn_are_every_line_of_the_game_newest_first(api, agent, send):
    first = send("One")
    second = send("Two")

    lines = api.get("/api/v1/billing/lines").json()["lines"]

    assert [line["turnId"] for line in lines] == [second["id"], first["id"]]


def test_lines_for_an_unknown_turn_are_empty(api, agent, send):
    send("One")

    response = api.get(f"/api/v1/billing/lines?turn={uuid.uuid4()}")

    assert response.json() == {"lines": [], "nextCursor": None}


@pytest.mark.parametrize("turn", ["not-a-turn", "12"])
def test_lines_with_a_bad_turn_id_is_400(api, turn):
    response = api.get(f"/api/v1/billing/lines?turn={turn}")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"
    assert "turn" in error_of(response)["message"]


def test_another_game_sees_only_its_own_lines(api, outsider, agent, send, two_memory_calls):
    outsider.put("/api/v1/agents/rival", {"systemPrompt": "Hi"}, format="json")
    theirs = outsider.post("/api/v1/agents/rival/messages", {"content": "Hello"}, format="json").json()[
        "turn"
    ]

    their_lines = outsider.get("/api/v1/billing/lines").json()["lines"]
    our_lines = api.get("/api/v1/billing/lines").json()["lines"]
    peek = outsider.get(f"/api/v1/billing/lines?turn={two_memory_calls['id']}").json()["lines"]

    assert {line["turnId"] for line in their_lines} == {theirs["id"]}
    assert {line["turnId"] for line in our_lines} == {two_memory_calls["id"]}
    assert peek == []


def test_lines_need_a_key(anonymous):
    response = anonymous.get("/api/v1/billing/lines")

    assert response.status_code == 401


# --- adjustments -----------------------------------------------------------------------


def test_adjustments_are_listed_newest_first_with_who_made_them_and_why(api, game):
    ledger.adjustment_post(game=game, amount="10", reason="first", made_by="boss")
    ledger.adjustment_post(game=game, amount="-2.5", reason="second", made_by="manage.py adjustcredits")

    response = api.get("/api/v1/billing/adjustments")

    adjustments = response.json()["adjustments"]
    assert [(a["reason"], a["amount"], a["madeBy"]) for a in adjustments] == [
        ("second", "-2.500000", "manage.py adjustcredits"),
        ("first", "10.000000", "boss"),
        ("Opening credits", "100.000000", "system"),
    ]


@pytest.mark.parametrize("role", ["admin", "designer"])
@pytest.mark.parametrize("amount", ["1000000", "-40.5"])
def test_no_api_key_adds_or_takes_away_credits(request, game, role, amount):
    client = client_for(request.getfixturevalue(f"{role}_key"))

    response = adjust(client, {"amount": amount, "reason": "I want more"})

    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "forbidden"
    assert "operators" in error["message"] and "adjustcredits" in error["message"]
    assert ledger.balance(game) == 100
    assert Adjustment.objects.filter(game=game).count() == 1  # the opening credits


@pytest.mark.parametrize("body", [{"amount": "lots", "reason": "x"}, {"amount": "10"}, {}, {"by": "me"}])
def test_a_keys_adjustment_is_403_whatever_its_body(admin_api, game, body):
    response = adjust(admin_api, body)

    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"
    assert ledger.balance(game) == 100


def test_an_adjustment_needs_a_key(anonymous, game):
    response = adjust(anonymous, {"amount": "10", "reason": "x"})

    assert response.status_code == 401
    assert ledger.balance(game) == 100


def test_an_adjustment_only_moves_its_own_games_balance(other_game, game):
    ledger.adjustment_post(game=other_game, amount="10", reason="theirs", made_by="boss")

    assert ledger.balance(other_game) == 110
    assert ledger.balance(game) == 100


@pytest.mark.parametrize(
    "method, path",
    [
        ("post", "/api/v1/billing"),
        ("put", "/api/v1/billing"),
        ("post", "/api/v1/billing/lines"),
        ("delete", "/api/v1/billing/lines"),
        ("delete", "/api/v1/billing/adjustments"),
    ],
)
def test_other_methods_on_billing_are_405(admin_api, game, method, path):
    response = getattr(admin_api, method)(path, {"amount": "10", "reason": "x"}, format="json")

    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"
    assert ledger.balance(game) == 100
