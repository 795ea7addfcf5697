"""bench/players.py runs end to end: N players at once, each to a fresh
character, then again warm, against the fake model on loopback — every
send answered, the CPU per send and the peaks read. A smoke run (two
players, a 0.1 s model), not a measurement: bench/README.md has those."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def test_the_players_benchmark_answers_every_player_first_and_warm(tmp_path, request):
    out = tmp_path / "players.json"
    prefix = f"studio_bench_test_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    env = {**os.environ, "BENCH_DB_PREFIX": prefix}
    request.addfinalizer(lambda: _drop(f"{prefix}_players"))
    run = subprocess.run(
        [sys.executable, "bench/players.py", "--players", "2", "--latency-ms", "100", "--again"]
        + ["--json-out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["failed"] is False
    (only,) = result["rounds"]
    for played in (only, only["again"]):
        assert (played["players"], played["errors"]) == (2, 0)
        assert played["wallSeconds"] >= played["idealSeconds"] == 0.1
        # /proc counts a process's CPU in 10 ms ticks, so two players' sends
        # on a busy machine can read 0: the figure is there, a number.
        assert isinstance(played["cpu"]["serverCpuMsPerUnit"], int | float)
        assert played["cpu"]["serverCpuMsPerUnit"] >= 0
        assert played["threadsPeak"] > 0 and played["rssPeakMb"] > 0
        # the web process's garbage-collector passes, read through the benchmark's hook
        assert played["fullGcPasses"] >= 0 and played["fullGcMsPerSend"] >= 0


def _drop(database: str) -> None:
    """The benchmark leaves its database for a look afterwards; a test's goes."""
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
