"""Agents in the Django admin, as a superuser: defined through
`agent_define` (its rules, the prompt's tokens recounted) and deleted
through `agent_delete` (dead turns end and give their holds back; a live
turn keeps its agent)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Agent, Turn, TurnStatus
from billing import ledger
from billing.models import Account
from studio.tokens import count_tokens
from tests.support.pages import CONFIG, html
from tests.support.turns import dead_turn

CHANGELIST = "/admin/agents/agent/"
ADD = CHANGELIST + "add/"


def change_url(agent) -> str:
    return f"{CHANGELIST}{agent.pk}/change/"


def delete_url(agent) -> str:
    return f"{CHANGELIST}{agent.pk}/delete/"


def live_turn(agent) -> Turn:
    """A turn running right now: its hold taken, its lease renewed."""
    hold = ledger.hold_estimate(max_tokens=agent.max_tokens, price=ledger.model_price(agent.model))
    ledger.hold_take(game=agent.game, amount=hold)
    return Turn.objects.create(
        agent=agent, status=TurnStatus.RUNNING, held=hold, lease_until=timezone.now() + timedelta(minutes=5)
    )


def held(game):
    return Account.objects.get(game=game).held


def ledger_consistent() -> bool:
    return all(check.is_consistent for check in ledger.ledger_check())


# --- defining ------------------------------------------------------------------------------


def test_changing_the_system_prompt_in_the_admin_recounts_its_tokens(admin_client, agent):
    prompt = "You are the dungeon master of the drowned chapel, and you keep its secrets close."
    assert admin_client.get(change_url(agent)).status_code == 200

    response = admin_client.post(change_url(agent), {**CONFIG, "system_prompt": prompt})

    assert response.status_code == 302, html(response)[:2000]
    agent.refresh_from_db()
    assert agent.system_prompt == prompt
    assert agent.system_tokens == count_tokens(prompt) != count_tokens("You are the dungeon master.")


@pytest.mark.parametrize(
    "change, says",
    [
        (
            {"max_open_tokens": "4000"},
            "memory.maxOpenTokens (4,000) must be below half of compaction.maxTokens",
        ),
        ({"system_prompt": "word " * 300, "max_tokens": "256"}, "leaves no room for a conversation"),
        ({"model": "gpt-4o"}, "Unknown model &#x27;gpt-4o&#x27;"),
    ],
)
def test_an_edit_the_definition_rules_refuse_shows_why_and_changes_nothing(admin_client, agent, change, says):
    before = Agent.objects.filter(pk=agent.pk).values().get()

    response = admin_client.post(change_url(agent), {**CONFIG, **change})

    assert response.status_code == 200
    assert says in html(response)
    assert Agent.objects.filter(pk=agent.pk).values().get() == before


def test_an_agent_added_in_the_admin_is_defined_with_its_tokens_counted(admin_client, game):
    assert admin_client.get(ADD).status_code == 200

    response = admin_client.post(ADD, {"game": game.pk, "name": "ferryman", **CONFIG})

    assert response.status_code == 302, html(response)[:2000]
    agent = Agent.objects.get(game=game, name="ferryman")
    assert agent.system_tokens == count_tokens(CONFIG["system_prompt"]) > 0
    assert (agent.max_open_tokens, agent.max_tokens) == (1000, 8000)


def test_adding_an_agent_whose_name_is_taken_is_refused_and_leaves_the_first_alone(admin_client, agent, game):
    response = admin_client.post(ADD, {"game": game.pk, "name": agent.name, **CONFIG})

    assert response.status_code == 200
    assert "already exists" in html(response)
    agent.refresh_from_db()
    assert agent.system_prompt == "You are the dungeon master."


def test_adding_an_agent_with_a_bad_name_shows_the_naming_rule(admin_client, game):
    response = admin_client.post(ADD, {"game": game.pk, "name": "the ferryman", **CONFIG})

    assert response.status_code == 200
    assert "is not a valid agent name" in html(response)
    assert not Agent.objects.filter(game=game).exists()


# --- deleting ------------------------------------------------------------------------------


def test_deleting_an_agent_with_a_dead_turn_gives_its_hold_back(admin_client, agent, game):
    dead_turn(agent)
    assert held(game) > 0

    response = admin_client.post(delete_url(agent), {"post": "yes"})

    assert response.status_code == 302
    assert not Agent.objects.filter(pk=agent.pk).exists()
    assert held(game) == 0
    assert ledger_consistent()


def test_an_agent_with_a_live_turn_is_not_deleted_and_the_page_says_why(admin_client, agent, game):
    turn = live_turn(agent)

    response = admin_client.post(delete_url(agent), {"post": "yes"}, follow=True)

    assert "has a turn in progress" in html(response)
    assert Agent.objects.filter(pk=agent.pk).exists()
    assert Turn.objects.get(pk=turn.pk).status == TurnStatus.RUNNING
    assert held(game) == turn.held
    assert ledger_consistent()


def test_bulk_delete_ends_dead_turns_and_keeps_an_agent_with_a_live_one(admin_client, define, game):
    idle, busy = define("idle"), define("busy")
    dead_turn(idle)
    running = live_turn(busy)

    response = admin_client.post(
        CHANGELIST,
        {"action": "delete_selected", "_selected_action": [idle.pk, busy.pk], "post": "yes"},
        follow=True,
    )

    text = html(response)
    assert "Deleted 1 agent." in text
    assert "Agent &#x27;busy&#x27; has a turn in progress" in text
    assert list(Agent.objects.filter(game=game).values_list("name", flat=True)) == ["busy"]
    assert held(game) == running.held
    assert ledger_consistent()


def test_the_bulk_delete_confirmation_page_lists_what_goes_with_the_agents(admin_client, agent):
    dead_turn(agent)

    response = admin_client.post(CHANGELIST, {"action": "delete_selected", "_selected_action": [agent.pk]})

    assert response.status_code == 200
    assert "Are you sure" in html(response)
    assert Agent.objects.filter(pk=agent.pk).exists()
