"""How much slower a quiet game's sends run beside a hostile tenant.

Runs tests/faults/test_hostile_tenant.py (two Daphne processes, PostgreSQL,
Redis, the OpenAI fake) RUNS times; each run measures the quiet game's sends
in rounds that switch the hostile load off and on, so the machine's drift
falls on both alike, and reports their p95 with the load off and on.

    .venv/bin/python bench/hostile_tenant.py [RUNS]
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TEST = "tests/faults/test_hostile_tenant.py"


def main(runs: int) -> None:
    ratios = []
    for run in range(1, runs + 1):
        with tempfile.TemporaryDirectory() as folder:
            figures = Path(folder) / "figures.json"
            env = {**os.environ, "STUDIO_BENCH_FIGURES": str(figures)}
            subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:warnings", TEST], env=env, check=True
            )
            measured = json.loads(figures.read_text())
        ratio = measured["loaded_p95"] / measured["calm_p95"]
        ratios.append(ratio)
        print(
            f"run {run}: p95 calm {measured['calm_p95'] * 1000:.0f} ms, "
            f"loaded {measured['loaded_p95'] * 1000:.0f} ms, ratio {ratio:.2f}"
        )
    print(f"ratio of p95s: min {min(ratios):.2f}, max {max(ratios):.2f} over {runs} runs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
