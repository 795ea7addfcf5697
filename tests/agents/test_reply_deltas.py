"""A reply's text goes to the agent's listeners as the model writes it,
with no database work: no connection is taken for it, so a full pool
cannot hold it up. (This module has no database access: pytest-django
refuses any.)"""

import asyncio
import uuid

from agents.models import Agent, Turn
from agents.sending.engine import _ReplyDeltas
from studio.live.events import LocalListener


def test_the_text_is_published_without_touching_the_database():
    agent, turn = Agent(pk=424242, name="dm"), Turn(uuid=uuid.uuid4())
    listener = LocalListener(agent.pk)
    try:
        stream = _ReplyDeltas(agent, turn)
        stream.add("The bells ")
        stream.finish("The bells ring at dusk.")

        async def heard():
            events = []
            while "".join(e.get("text", "") for e in events) != "The bells ring at dusk.":
                batch = await listener.next(5)
                assert batch, f"nothing more was heard after {events}"
                events += batch
            return events

        events = asyncio.run(heard())
    finally:
        listener.close()

    assert {(e["type"], e["turnId"]) for e in events} == {("reply.delta", str(turn.uuid))}
