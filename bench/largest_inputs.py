"""How long each read of the largest agent file takes.

Runs tests/agents/test_largest_inputs.py (an agent imported from a file as
large as a request may be, in each hostile shape the limits leave open, then
every page and API read of it; Django's test client, so the studio's own
work, no server) RUNS times, and prints each shape's slowest read against
the target. The test asserts that the work is bounded (a read's diffs make
at most DIFF_READ_MAX_COMPARISONS comparisons); the seconds are this
script's.

    .venv/bin/python bench/largest_inputs.py [RUNS]
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TEST = "tests/agents/test_largest_inputs.py"
# The slowest read of any shape, on 2 quiet cores.
TARGET_SECONDS = 5.0


def main(runs: int) -> int:
    slowest: dict[str, tuple[float, str]] = {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            figures = Path(folder) / "figures.jsonl"
            env = {**os.environ, "STUDIO_BENCH_FIGURES": str(figures)}
            command = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:warnings",
                "-p",
                "no:cacheprovider",
                TEST,
            ]
            subprocess.run(command, env=env, check=True)
            for line in figures.read_text().splitlines():
                measured = json.loads(line)
                path, seconds = max(measured["seconds"].items(), key=lambda item: item[1])
                if seconds > slowest.get(measured["shape"], (0.0, ""))[0]:
                    slowest[measured["shape"]] = (seconds, path)
    for shape, (seconds, path) in sorted(slowest.items()):
        print(f"{shape:24} slowest read {seconds * 1000:7.0f} ms  {path}")
    worst = max(seconds for seconds, _ in slowest.values())
    met = worst <= TARGET_SECONDS
    print(
        f"slowest read of any shape over {runs} run(s): {worst:.2f} s, target ≤ {TARGET_SECONDS:g} s: "
        f"{'met' if met else 'not met'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
