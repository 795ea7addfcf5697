"""CPU to check a long text in a request's body, by its length and alphabet.

    .venv/bin/python bench/long_text.py [--chars 100000,2000000] [--root CHECKOUT]

In process, no server: a send's body (`{"content": …}`) is checked as the
API checks it (`SendSerializer`), with content of N characters in three
alphabets: ASCII, Latin-1 (`é`, one byte a character in Python's own
storage) and an emoji (four). 100,000 characters is the longest message a
send takes (`CONTENT_MAX_CHARS`); 2,000,000 about the most a body may hold
(`STUDIO_MAX_BODY_BYTES`, 2 MiB), refused as too long only after this
check. Prints the CPU (process time, best of 3) per body. `--root` runs
another checkout's code, to compare two commits.
"""

import argparse
import gc
import time
from pathlib import Path

import benchlib

ALPHABETS = {"ASCII": "x", "Latin-1": "é", "emoji": "\U0001f600"}


def best_of_three(check) -> float:
    times = []
    for _ in range(3):
        gc.collect()
        start = time.process_time()
        check()
        times.append(time.process_time() - start)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", default="100000,2000000")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    benchlib.django_in_process(args.root)
    from agents.api import serializers
    from agents.api.serializers import SendSerializer

    print(f"(the code of {Path(serializers.__file__).parents[2]})")
    lengths = [int(n) for n in args.chars.split(",")]
    for name, character in ALPHABETS.items():
        shown = []
        for n in lengths:
            body = {"content": character * n}
            ms = best_of_three(lambda body=body: SendSerializer(data=body).is_valid())
            shown.append(f"{n:>9,} characters {ms:7.2f} ms")
        print(f"{name:8} " + "   ".join(shown))


if __name__ == "__main__":
    main()
