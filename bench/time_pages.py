"""CPU to page through an agent's store as of a block, by the store's size.

    .venv/bin/python bench/time_pages.py [--memories 1000,4000,16000] [--limit 1000] [--root CHECKOUT]

In process, on an in-memory SQLite: an agent whose block 1 created N
memories (as rows of changes, the way play leaves them), then every page
of `GET /agents/{name}/memories?atBlock=1` read in turn through
`agents.history.as_of.memories_at_block`, `--limit` memories a page (the
API's default, 1,000). Prints the CPU (process time) for all of the pages
and how it grows from one N to the next: ×4 memories is ×4 for a read
linear in the store, ×16 for one that replays every change per page.
`--root` runs another checkout's code, to compare two commits.
"""

import argparse
import os
import time
from pathlib import Path

import benchlib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", default="1000,4000,16000")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    os.environ.setdefault("STUDIO_ALLOW_SCRIPTED_MODEL", "1")  # the agent never plays
    benchlib.django_in_process(args.root)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from agents.history import as_of
    from agents.models import Agent, Block, TurnStatus
    from agents.services import AgentDefinition, agent_define
    from memories.models import MemoryEvent
    from memories.selectors import MEMORIES
    from studio.services import game_create

    print(f"(the code of {Path(as_of.__file__).parents[2]})")
    game, _ = game_create(slug="pages", credits=100)
    after = {"description": "d", "content": "c" * 40, "open": False, "version": 1}
    times = []
    for size in [int(n) for n in args.memories.split(",")]:
        definition = AgentDefinition(memory_enabled=True, model="scripted")
        agent, _ = agent_define(game=game, name=f"a{size}", definition=definition, by=None, via="command")
        MemoryEvent.objects.bulk_create(
            MemoryEvent(agent=agent, name=f"m{n:06d}", change="created", by="agent", block=1, after=after)
            for n in range(size)
        )
        Block.objects.create(agent=agent, number=1, status=TurnStatus.COMPLETED, entries=[])
        Agent.objects.filter(pk=agent.pk).update(last_block=1)
        agent.refresh_from_db()
        start, pages, seen, key = time.process_time(), 0, 0, None
        while True:
            body = as_of.memories_at_block(agent, 1, after=key, limit=args.limit)
            pages, seen = pages + 1, seen + len(body["memories"])
            if body["nextCursor"] is None:
                break
            key = MEMORIES.key(body["nextCursor"])
        times.append(time.process_time() - start)
        assert seen == size, (seen, size)
        growth = f"   x{times[-1] / times[-2]:.1f}" if len(times) > 1 else ""
        print(f"{size:>7} memories, {pages:>3} pages: {times[-1]:7.2f} s{growth}")


if __name__ == "__main__":
    main()
