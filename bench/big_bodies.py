"""CPU to read a large request body: a long text, and many values.

    .venv/bin/python bench/big_bodies.py [--chars 100000,2000000] [--root CHECKOUT]

In process, no server; CPU (process time) per body, best of 3. `--root`
runs another checkout's code, to compare two commits.

A long text: a send's body (`{"content": …}`) checked as the API checks
it (`SendSerializer`), its content N characters in three alphabets: ASCII,
Latin-1 (`é`, one byte a character in Python's own storage) and an emoji
(four). 100,000 characters is the longest message a send takes
(`CONTENT_MAX_CHARS`); 2,000,000 about the most a body may hold
(`STUDIO_MAX_BODY_BYTES`, 2 MiB), refused as too long only after this
check.

Many values: a body of ~2 MiB in shapes that hold as many JSON values as
that allows, read as the API reads every body (`StrictJSONParser`: parsed,
then held to the depth and width bounds), and the bounds' check alone.
"""

import argparse
import io
import json
from pathlib import Path

import benchlib

ALPHABETS = {"ASCII": "x", "Latin-1": "é", "emoji": "\U0001f600"}
SHAPES = {
    "1,000,000 numbers": "[" + "0," * 999_999 + "0]",
    "500,000 empty lists": "[" + "[]," * 499_999 + "[]]",
    "500,000 empty objects": "[" + "{}," * 499_999 + "{}]",
    "200,000 small objects": "[" + '{"a":[1]},' * 199_999 + '{"a":[1]}]',
    "100 levels deep, 7,000 times": "[" + ",".join(["[" * 99 + "0" + "]" * 99] * 7_000) + "]",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", default="100000,2000000")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    benchlib.django_in_process(args.root)
    from agents.api import serializers
    from agents.api.serializers import SendSerializer
    from studio.http.parsers import StrictJSONParser, json_bounds_check

    print(f"(the code of {Path(serializers.__file__).parents[2]})")
    lengths = [int(n) for n in args.chars.split(",")]
    for name, character in ALPHABETS.items():
        shown = []
        for n in lengths:
            body = {"content": character * n}
            ms = benchlib.best_of_three(lambda body=body: SendSerializer(data=body).is_valid())
            shown.append(f"{n:>9,} characters {ms:7.2f} ms")
        print(f"a text, {name:8} " + "   ".join(shown))
    for name, text in SHAPES.items():
        raw = text.encode()
        read = benchlib.best_of_three(lambda raw=raw: StrictJSONParser().parse(io.BytesIO(raw)))
        value = json.loads(raw)
        check = benchlib.best_of_three(lambda value=value: json_bounds_check(value))
        print(
            f"{name:30} {len(raw) / 2**20:4.2f} MiB   read {read:7.1f} ms   the bounds' check alone {check:7.1f} ms"
        )


if __name__ == "__main__":
    main()
