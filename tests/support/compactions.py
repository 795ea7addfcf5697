"""Waiting for a compaction that runs elsewhere (a thread, a worker)."""

from agents.models import Compaction
from tests.conftest import wait_for


def wait_for_compaction(agent, status, timeout=60):
    """Wait until the agent's newest compaction has `status`; return it."""
    wait_for(lambda: Compaction.objects.filter(agent=agent).latest("id").status == status, timeout=timeout)
    return Compaction.objects.filter(agent=agent).latest("id")
