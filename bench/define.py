"""CPU of a definition that changes nothing: what game code sends at the top of every event handler.

    .venv/bin/python bench/define.py [--defines 300] [--root CHECKOUT]

In process, on an in-memory SQLite (or the database DATABASE_URL names):
an agent with a few turns, memories and a checkpoint behind it, then
`--defines` PUTs of its own definition through the API, each answered 200
with nothing written. Prints this process's CPU per PUT, median of five
rounds. `--root` runs another checkout's code, to compare two commits
(bench/README.md, "A definition that changes nothing").
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import benchlib
from benchlib import call, script

DEFINITION = {"systemPrompt": "You are the dungeon master.", "model": "scripted", "memory": {}}
ROUNDS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--defines", type=int, default=300)
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    os.environ.setdefault("STUDIO_ALLOW_SCRIPTED_MODEL", "1")
    os.environ.setdefault(
        "STUDIO_COMPACTION_RUNNER", "inline"
    )  # in this thread: the database is in its memory
    benchlib.django_in_process(args.root)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from rest_framework.test import APIClient

    from agents.compaction import compaction_request
    from agents.models import Agent, CompactionReason
    from studio.services import game_create

    game, key = game_create(slug="define", credits=100)
    api = APIClient(SERVER_NAME="127.0.0.1")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    created = api.put("/api/v1/agents/dm", DEFINITION, format="json")
    assert created.status_code == 201, created.content
    for number in range(6):
        content = script(call("close_memory", name=f"note-{number}", description="d", content="c"))
        assert api.post("/api/v1/agents/dm/messages", {"content": content}, format="json").status_code == 200
    compaction_request(agent=Agent.objects.get(game=game, name="dm"), reason=CompactionReason.MANUAL)

    stats = api.put("/api/v1/agents/dm", DEFINITION, format="json").json()["stats"]
    assert stats["lastCheckpoint"] and stats["openTokens"] is not None, stats
    per_put = []
    for _ in range(ROUNDS):
        start = time.process_time()
        for _ in range(args.defines):
            answer = api.put("/api/v1/agents/dm", DEFINITION, format="json")
            assert answer.status_code == 200, answer.content
        per_put.append((time.process_time() - start) / args.defines * 1000)
    print(f"(the code of {args.root})")
    print(
        f"unchanged PUT: {statistics.median(per_put):.2f} ms of CPU (rounds: "
        + ", ".join(f"{ms:.2f}" for ms in per_put)
        + ")"
    )


if __name__ == "__main__":
    main()
