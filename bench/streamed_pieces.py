"""CPU to read a streamed answer, by how many pieces the model sends it in.

    .venv/bin/python bench/streamed_pieces.py [--pieces 4096,16384] [--size 16] [--root CHECKOUT]

In process, no server: an answer of N pieces of `--size` characters each
(the model chooses both; `STUDIO_MODEL_MAX_OUTPUT_TOKENS`, 4,096 by
default, bounds a step's output) is read as each provider reads its
stream: `openai:` a reply's text and a tool call's arguments from the
chunks' JSON, `anthropic:` a text block from its events, and a reply of N
adjacent text blocks; and, for either, one line of the event stream that
the server sends in N pieces (`http1.sse_events`). Prints the CPU (process time, best of 3) per answer
and how it grows from one N to the next: linear reads grow as N does.
`--root` runs another checkout's code, to compare two commits.
"""

import argparse
import json
from pathlib import Path

import benchlib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pieces", default="4096,16384")
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    benchlib.django_in_process(args.root)
    from agents.providers import anthropic_messages, http1, openai_chat

    print(f"(the code of {Path(openai_chat.__file__).parents[2]})")
    piece = "x" * args.size

    def openai_text(n: int):
        chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": piece}}]})
        end = json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        return lambda: openai_chat._Streamed.read(iter([chunk] * n + [end]), lambda text: None)

    def openai_arguments(n: int):
        def call(arguments: str, **more) -> str:
            function = {"arguments": arguments, **more}
            return json.dumps(
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **function}]}}]}
            )

        first = json.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "id": "c1", "function": {"name": "x", "arguments": '{"k":"'}}
                            ]
                        },
                    }
                ]
            }
        )
        middle = json.dumps(
            {
                "choices": [
                    {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}}
                ]
            }
        )
        end = json.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"}'}}]},
                        "finish_reason": "tool_calls",
                    }
                ]
            }
        )
        return lambda: openai_chat._Streamed.read(iter([first] + [middle] * n + [end]), lambda text: None)

    def anthropic_text(n: int):
        start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}

        def read():
            message = anthropic_messages._Message()
            message.add({"type": "message_start", "message": {"usage": {"input_tokens": 1}}}, None)
            message.add(start, None)
            for _ in range(n):
                message.add(delta, None)
            return anthropic_messages._text_of(message.content)

        return read

    def anthropic_blocks(n: int):
        def read():
            message = anthropic_messages._Message()
            for index in range(n):
                block = {"type": "text", "text": piece}
                message.add({"type": "content_block_start", "index": index, "content_block": block}, None)
            return anthropic_messages._text_of(message.content)

        return read

    def event_line(n: int):
        chunks = [b"data: "] + [piece.encode()] * n + [b"\n\n"]
        return lambda: list(http1.sse_events(chunks))

    sizes = [int(n) for n in args.pieces.split(",")]
    for name, make in (
        ("openai: a reply's text", openai_text),
        ("openai: a tool call's arguments", openai_arguments),
        ("anthropic: a text block", anthropic_text),
        ("anthropic: adjacent text blocks", anthropic_blocks),
        ("either: one event line in pieces", event_line),
    ):
        times = [benchlib.best_of_three(make(n)) for n in sizes]
        shown = "  ".join(f"{n:>6} pieces {ms:8.1f} ms" for n, ms in zip(sizes, times, strict=True))
        growth = " ".join(f"x{later / earlier:.1f}" for earlier, later in zip(times, times[1:], strict=False))
        print(f"{name:34} {shown}   growth {growth}")


if __name__ == "__main__":
    main()
