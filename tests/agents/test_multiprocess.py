"""The turn slot holds across processes: two OS processes sending to one
agent at once still run its turns one at a time, with no block lost."""

import os
import subprocess
import sys
import textwrap
from itertools import pairwise
from pathlib import Path

import pytest

from agents.models import Block, Turn, TurnStatus
from tests.support.database import database_url_of_this_test_run

# Two Django processes send at once.
pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]

SENDER = textwrap.dedent(
    """
    import json, os, sys
    import django
    os.environ["DJANGO_SETTINGS_MODULE"] = "studio.settings"
    django.setup()
    from tests.support.sending import turn_send
    from agents.models import Agent
    agent = Agent.objects.get(pk=int(sys.argv[1]))
    for n in range(int(sys.argv[3])):
        script = {"script": [{"sleep": 0.02}, {"say": f"{sys.argv[2]}-{n}"}]}
        turn = turn_send(agent=agent, content=json.dumps(script))
        assert turn.status == "completed", turn.error
    """
)


@pytest.mark.django_db(transaction=True)
def test_two_processes_sending_to_one_agent_take_turns(define):
    agent = define("dm")
    env = {**os.environ, "DATABASE_URL": database_url_of_this_test_run()}

    procs = [
        subprocess.Popen([sys.executable, "-c", SENDER, str(agent.pk), name, "6"], cwd=ROOT, env=env)
        for name in ("a", "b")
    ]
    codes = [p.wait(timeout=120) for p in procs]

    assert codes == [0, 0]
    blocks = list(Block.objects.filter(agent=agent).order_by("number"))
    assert [b.number for b in blocks] == list(range(1, 13))
    replies = sorted(b.entries[-1]["content"] for b in blocks)
    assert replies == sorted([f"a-{n}" for n in range(6)] + [f"b-{n}" for n in range(6)])
    turns = sorted(Turn.objects.filter(agent=agent), key=lambda t: t.started_at)
    assert all(t.status == TurnStatus.COMPLETED for t in turns)
    for before, after in pairwise(turns):
        assert after.started_at >= before.ended_at
