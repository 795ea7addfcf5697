"""Forking an agent from a block: a new agent with the same config, as the
original stood when the block ended; the original untouched.

Here, the tests that need a commit or an agent of their own; those that
only look at the nine-block story are in story/test_fork.py, which plays it
once."""

import pytest

from agents.models import Turn, TurnStatus
from agents.sending.turn_slot import turn_cancel
from tests.support.sending import turn_send
from tests.support.time_story import DM, play

from ..conftest import UNTIL_CANCELLED, error_of, in_thread, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def story(api, agent, studio_conf):
    return play(api, studio_conf)


def fork(api, at_block, name="dm-b", status=201):
    response = api.post(f"{DM}/fork", {"name": name, "atBlock": at_block}, format="json")
    assert response.status_code == status, response.content
    return response


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, code",
    [
        ({"name": "dm-b"}, "invalid_request"),
        ({"atBlock": 2}, "invalid_request"),
        ({"name": "dm-b", "atBlock": "two"}, "invalid_request"),
        ({"name": "dm-b", "atBlock": 0}, "invalid_request"),
        ({"name": "dm b!", "atBlock": 2}, "invalid_request"),
        ({"name": "import", "atBlock": 2}, "invalid_name"),
        ({"name": "dm-b", "atBlock": 2, "at": 3}, "invalid_request"),
    ],
)
def test_a_bad_fork_request_is_400(api, agent, body, code):
    response = api.post(f"{DM}/fork", body, format="json")

    assert response.status_code == 400
    assert error_of(response)["code"] == code


def test_a_fork_at_a_block_still_being_played_is_409(api, agent):
    turn_send(agent=agent, content="first")
    thread, _ = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    running = fork(api, 2, status=409)
    earlier = fork(api, 1)
    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    thread.join(10)

    assert error_of(running)["code"] == "block_running"
    assert earlier.json()["stats"]["blocks"] == 1
