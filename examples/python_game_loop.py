"""A player typing to the dungeon master in a terminal, the replies
streamed as they are written: the smallest game loop on the studio's
Python client (clients/python).

    make run                                  # in one terminal: prints an API key
    pip install ./clients/python              # once (`make install-dev` does it for .venv)
    STUDIO_KEY=sk_... python examples/python_game_loop.py

STUDIO_URL says where the studio is (http://127.0.0.1:8000 by default).
Type a line to say it; `/memories` shows what the dungeon master keeps,
`/aside <text>` says something that leaves no trace (a transient send),
`/quit` (or Ctrl-D) ends. Under `make run` the agent plays on the offline
`scripted` model, which answers by quoting you; name a real model in the
definition below (`"model": "openai:gpt-4o-mini"`) for a real story.
"""

import os
import sys

from studio_client import StudioError, connect

PROMPT = """You are the dungeon master. Keep the story straight.

Keep a memory named `quest` open at all times: what the player is trying to do right
now and why. Update it whenever their goal changes.

Keep `npcs` (everyone they have met and how that meeting went) and `world` (places,
factions, rules you have established) as closed memories. Open one when the scene turns
to it, write what changed, and close it again."""


def main() -> int:
    key = os.environ.get("STUDIO_KEY") or (sys.argv[1] if len(sys.argv) > 1 else "")
    if not key:
        print("Give the API key `make run` printed: STUDIO_KEY=sk_... python examples/python_game_loop.py")
        return 2
    with connect(os.environ.get("STUDIO_URL", "http://127.0.0.1:8000"), key) as io:
        try:
            io.agents.dm = io.Agent("dm", {"systemPrompt": PROMPT, "memory": {}})
            # Waits for the definition: a refusal of it is raised here.
            io.agents.dm.on(
                "memory.changed",
                lambda event: print(f"  [{event['by']} {event['change']} '{event['name']}']"),
            )
        except StudioError as error:
            print(f"The studio refused: {error.message}")
            return 1
        print("You stand at the edge of the drowned coast. What do you do? (/memories, /aside …, /quit)")
        return play(io.agents.dm)


def play(dm) -> int:
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            return 0
        if line == "/quit":
            return 0
        if line == "/memories":
            for memory in dm.memories()["memories"]:
                state = "open" if memory["open"] else "closed"
                print(f"  {memory['name']} ({state}): {memory['description']}")
            continue
        aside = line.startswith("/aside ")
        if not line or (line.startswith("/") and not aside):
            continue
        try:
            turn = dm.send(
                line.removeprefix("/aside "),
                transient=aside,
                on_text=lambda text: print(text, end="", flush=True),
            )
        except StudioError as error:  # out of credits, the studio gone for good, …
            print(f"\n  (the studio refused: {error.message})")
            continue
        print()
        if turn["status"] != "completed":
            print(f"  (the turn {turn['status']}: {turn.get('error', 'no reply')})")


if __name__ == "__main__":
    sys.exit(main())
