"""A player at the inn's counter, in a terminal: the innkeeper hands over
what the player asks for through a tool the game runs, `give_item`, and
the game keeps the stock and the player's pack (the studio never sees
them: it hears what give_item answered).

    make run                                  # in one terminal: prints an API key
    pip install ./clients/python              # once (`make install-dev` does it for .venv)
    STUDIO_KEY=sk_... python examples/python_innkeeper.py

STUDIO_URL says where the studio is (http://127.0.0.1:8000 by default),
STUDIO_AGENT which character (innkeeper). `/pack` shows what you carry,
`/quit` (or Ctrl-D) leaves. On the offline `scripted` model (make run's),
which only quotes you, `/ask ITEM` has it call give_item as a real model
would.
"""

import json
import os
import sys

from studio_client import StudioError, connect, tool

PROMPT = """You keep the Drowned Bell inn. When the player asks for something from the stock,
hand it over with give_item, then tell them what they got; if give_item says there is none,
say so."""

# The game's state, and the one way the innkeeper changes it.
stock = {"key": 1, "ale": 3, "lantern": 1}
pack: list[str] = []


@tool(
    description="Hand the player one item from the inn's stock: key, ale or lantern.",
    parameters={"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    timeout_seconds=10,
)
def give_item(args, ctx):
    item = args["item"]
    if not stock.get(item):
        left = ", ".join(name for name, count in stock.items() if count) or "nothing"
        raise LookupError(f"There is no {item} left to give. The stock has: {left}.")
    stock[item] -= 1
    pack.append(item)
    return {"given": item, "pack": pack}


def main() -> int:
    key = os.environ.get("STUDIO_KEY") or (sys.argv[1] if len(sys.argv) > 1 else "")
    if not key:
        print("Give the API key `make run` printed: STUDIO_KEY=sk_... python examples/python_innkeeper.py")
        return 2
    with connect(os.environ.get("STUDIO_URL", "http://127.0.0.1:8000"), key) as io:
        io.agents.innkeeper = io.Agent(
            os.environ.get("STUDIO_AGENT", "innkeeper"), {"systemPrompt": PROMPT, "tools": [give_item]}
        )
        try:
            agent = io.agents.innkeeper.ready  # a refusal of the definition is raised here
        except StudioError as error:
            print(f"The studio refused: {error.message}")
            return 1
        scripted = agent["model"] == "scripted"
        print(f"The innkeeper ({agent['model']}) looks up from the counter. (/pack, /quit)")
        if scripted:
            print(
                "  /ask ITEM  ask for key, ale or lantern (the offline 'scripted' model only quotes you otherwise)"
            )
        play(io.agents.innkeeper, scripted)
    print(f"You leave with: {', '.join(pack) or 'nothing'}.")
    return 0


def play(innkeeper, scripted: bool) -> None:
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            return
        if line == "/quit":
            return
        if line == "/pack":
            print(f"  you carry: {', '.join(pack) or 'nothing'}")
            continue
        if scripted and line.startswith("/ask "):
            item = line.removeprefix("/ask ").strip()
            steps = [
                {"call": "give_item", "args": {"item": item}},
                {"say": "The innkeeper reaches under the counter."},
            ]
            line = json.dumps({"script": steps})
        if not line or line.startswith("/"):
            continue
        try:
            turn = innkeeper.send(line, on_text=lambda text: print(text, end="", flush=True))
        except StudioError as error:  # out of credits, the studio gone for good, …
            print(f"\n  (the studio refused: {error.message})")
            continue
        print()
        for call in turn["toolCalls"]:
            refused = "refused: " if call["isError"] else ""
            print(f"  ({call['name']} {call['arguments'].get('item', '')}: {refused}{call['result']})")
        if turn["status"] != "completed":
            print(f"  (the turn {turn['status']}: {turn.get('error', 'no reply')})")


if __name__ == "__main__":
    sys.exit(main())
