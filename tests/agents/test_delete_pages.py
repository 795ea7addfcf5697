"""Deleting an agent from the pages, through Django's test client: for the
game's admins (as only admin keys may DELETE through the API), after a
page that says what goes and what stays; refused while a turn runs.
(In Chromium: tests/browser/test_agent_lifecycle.py.)"""

import re

import pytest
from django.test import Client

from agents.models import Agent, Turn, TurnStatus
from agents.sending.turn_slot import turn_cancel
from billing.models import CostLine
from memories.models import Memory
from tests.conftest import UNTIL_CANCELLED, call, in_thread, page_user, script, wait_for
from tests.support.pages import html
from tests.support.sending import turn_send

PAGE = "/studio/ashmere/agents/dm/"
DELETE = PAGE + "delete/"


@pytest.fixture
def played(agent):
    """dm with two blocks, a memory and their cost lines."""
    turn_send(
        agent=agent,
        content=script(call("close_memory", name="quest", description="d", content="Find the key.")),
    )
    turn_send(agent=agent, content="Where am I?")
    return agent


def counted(page: str, name: str) -> str:
    found = re.search(rf'data-count="{name}">[^<]*<strong>([\d,]+)</strong>', page)
    assert found, f"the page does not count {name}"
    return found.group(1)


def test_an_admin_is_offered_delete_on_the_agent_page_and_a_designer_is_not(admin, game, agent):
    designer = Client()
    designer.force_login(page_user("mara", game))

    assert f'href="{DELETE}"' in html(admin.get(PAGE))
    assert f'href="{DELETE}"' not in html(designer.get(PAGE))


def test_the_confirmation_says_what_goes_and_what_stays(admin, played):
    response = admin.get(DELETE)

    page = html(response)
    assert response.status_code == 200
    assert counted(page, "blocks") == "2"
    assert counted(page, "memories") == "1"
    assert counted(page, "revisions") == "1"
    assert counted(page, "cost-lines") == str(CostLine.objects.filter(agent_name="dm").count())
    assert 'data-action="confirm-delete"' in page
    assert Agent.objects.filter(name="dm").exists()  # asking deletes nothing


def test_confirming_deletes_the_agent_and_keeps_its_cost_lines(admin, played):
    lines = CostLine.objects.filter(agent_name="dm").count()

    response = admin.post(DELETE)

    assert response.status_code == 302 and response["Location"] == "/studio/ashmere/agents/"
    assert not Agent.objects.filter(name="dm").exists()
    assert not Memory.objects.exists() and not Turn.objects.exists()
    assert lines > 0 and CostLine.objects.filter(agent_name="dm").count() == lines
    listed = html(admin.get("/studio/ashmere/agents/"))
    assert "Deleted dm, with its history, memories, checkpoints and replays." in listed


def test_a_designer_may_not_delete(designer, agent):
    assert designer.get(DELETE).status_code == 403
    assert designer.post(DELETE).status_code == 403
    assert Agent.objects.filter(name="dm").exists()


def test_an_outsider_gets_404(outsider_client, agent):
    assert outsider_client.post(DELETE).status_code == 404
    assert Agent.objects.filter(name="dm").exists()


def test_put_and_other_methods_are_refused(admin, agent):
    assert admin.put(DELETE).status_code == 405


@pytest.mark.django_db(transaction=True)
def test_delete_is_refused_while_a_turn_runs_and_says_so(admin, agent):
    thread, box = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    asked = html(admin.get(DELETE))
    refused = admin.post(DELETE)
    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    thread.join(10)

    assert "data-busy" in asked
    assert refused.status_code == 409
    assert 'data-refusal="agent_busy"' in html(refused) and "has a turn in progress" in html(refused)
    assert Agent.objects.filter(name="dm").exists()
    assert box["result"].status == TurnStatus.CANCELLED
    assert admin.post(DELETE).status_code == 302
