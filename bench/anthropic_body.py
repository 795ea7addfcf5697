"""CPU to build an `anthropic:` model step's request body, by history length.

    .venv/bin/python bench/anthropic_body.py [--messages 400,2000] [--calls 20] [--root CHECKOUT]

In process, no server: a history of N messages (turns of four: the
player, a tool call, its result, the reply; every call's id `call_1`, as
the scripted model gives them; `--unique-ids`, each its own) is encoded once, then extended by one turn
and encoded again `--calls` times, as an agent's sends would. Prints the
CPU (process time) per body. `--root` runs another checkout's code (one
from before `request_body` encodes the whole request each call), so two
commits can be compared in alternating runs.
"""

import argparse
import time
from pathlib import Path

import benchlib


def turn(number: int, unique: bool = False) -> list[dict]:
    call_id = f"toolu_{number:08d}" if unique else "call_1"
    call = {
        "id": call_id,
        "name": "open_memory",
        "arguments": {"name": "notes", "why": ["b", {"y": 2, "x": 1}]},
    }
    return [
        {"role": "user", "content": f"Player message {number}: " + "what do you make of the old mill? " * 5},
        {"role": "assistant", "content": None, "toolCalls": [call]},
        {"role": "tool", "toolCallId": call_id, "name": "open_memory", "content": "Open.", "isError": False},
        {
            "role": "assistant",
            "content": f"Reply {number}. " + "The mill has stood there for a century. " * 10,
        },
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", default="400,2000")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument(
        "--unique-ids", action="store_true", help="each call an id of its own, as Anthropic's are"
    )
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    benchlib.django_in_process(args.root)
    from agents.providers import anthropic_messages as messages_api
    from agents.providers.base import ModelRequest

    print(f"(the code of {Path(messages_api.__file__).parents[2]})")
    params = {"model": "claude-bench", "max_tokens": 1000}

    def body(request: ModelRequest) -> bytes:
        if hasattr(messages_api, "request_body"):
            return messages_api.request_body(request, params)
        history = messages_api.request_messages(request, tools_offered=True)
        return messages_api._json({**params, "messages": history, "stream": True})

    for size in (int(n) for n in args.messages.split(",")):
        history = [m for number in range(size // 4) for m in turn(number, args.unique_ids)]

        def ask(messages):
            return ModelRequest(
                system="You keep the mill.",
                context_block="Memory. " * 200,
                messages=messages,
                tools=["open_memory"],
            )

        body(ask(history))
        start = time.process_time()
        for index in range(args.calls):
            history = history + turn(size + index, args.unique_ids)
            body(ask(history))
        per = (time.process_time() - start) / args.calls * 1000
        print(f"{size:>6} messages: {per:8.3f} ms of CPU per body")


if __name__ == "__main__":
    main()
