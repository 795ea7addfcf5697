"""Hostile players beside a quiet game: what they cost the studio, and the
quiet game.

Runs tests/faults/test_hostile_player.py (two Daphne processes with pools,
PostgreSQL, Redis, a Celery worker, the hostile model of
tests/support/hostile_model.py) for about a minute of rounds: each round
measures the quiet game's sends with the ten hostile players off, then
beside them (every player's next attacks, on a balance that runs out), so
the machine's drift falls on both. Before the rounds one player plays
every attack alone, each turn's WAL and events measured on their own. It
prints the quiet game's p50 off and on and their ratio (target: within
2×), WAL and event bytes per hostile turn, the agents' event buffers in
Redis, server errors, the lowest balance seen, checkledger's answer and
the tokens billed against those charged.

    .venv/bin/python bench/hostile_player.py [--rounds 5] [--turns 4]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TEST = "tests/faults/test_hostile_player.py"
TARGET_RATIO = 2.0


def run(rounds: int, turns: int, quiet_sends: int, quiet_process: bool) -> tuple[dict, int]:
    """The test's figures, and its exit status (its assertions are the
    invariants: a non-zero status means one did not hold)."""
    with tempfile.TemporaryDirectory() as folder:
        figures = Path(folder) / "figures.json"
        env = {
            **os.environ,
            "STUDIO_BENCH_FIGURES": str(figures),
            "STUDIO_BENCH_ROUNDS": str(rounds),
            "STUDIO_BENCH_TURNS": str(turns),
            "STUDIO_BENCH_QUIET_SENDS": str(quiet_sends),
        }
        if quiet_process:
            env["STUDIO_BENCH_QUIET_PROCESS"] = "1"
        test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:warnings", TEST], env=env)
        if not figures.exists():
            raise SystemExit(f"the run wrote no figures (pytest exited {test.returncode})")
        return json.loads(figures.read_text()), test.returncode


def kib(size: float) -> str:
    return f"{size / 1024:,.1f} KiB"


def wal(written: dict) -> str:
    """This database's WAL (pg_walinspect), and the whole server's."""
    ours = "?" if written["database"] is None else kib(written["database"])
    return f"{ours} ({kib(written['server'])})"


def cpu_lines(cpu: dict, turns: int) -> list[str]:
    """Cores busy with the players off and on, by whom; CPU per hostile turn."""
    lines = []
    for label in ("off", "on"):
        used = cpu[label]
        wall = used["wall"] or 1
        lines.append(
            f"players {label}: {wall:.1f} s, cores busy: machine {used['machine'] / wall:.2f}, "
            f"web {used['web'] / wall:.2f}, worker {used['worker'] / wall:.2f}, model {used['model'] / wall:.2f}"
        )
    on = cpu["on"]
    studio = on["web"] + on["worker"]
    lines.append(
        f"studio CPU with the players on: {studio:.1f} s, {studio * 1000 / max(turns, 1):.0f} ms per hostile turn"
    )
    return lines


def report(figures: dict, status: int, load: tuple) -> list[str]:
    calm, loaded = statistics.median(figures["calm"]), statistics.median(figures["loaded"])
    ratio = loaded / calm
    billed, charged = figures["billed"], figures["charged"]
    buffers, memory = figures["eventBufferBytes"], figures["eventBufferMemory"]
    lines = [
        f"load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, at the end "
        + " / ".join(f"{n:.2f}" for n in os.getloadavg()),
        f"phases (s): {figures['seconds']}",
        f"quiet game p50: {calm * 1000:.1f} ms solo ({len(figures['calm'])} sends), "
        f"{loaded * 1000:.1f} ms beside the hostile players ({len(figures['loaded'])} sends): "
        f"{ratio:.2f}× ({'within' if ratio <= TARGET_RATIO else 'NOT within'} {TARGET_RATIO:g}×)",
        *cpu_lines(figures["cpu"], figures["hostileTurns"]),
        f"hostile turns in the rounds: {figures['hostileTurns']}; WAL per turn {wal(figures['walPerTurn'])} "
        f"(bound {kib(figures['bounds']['wal_per_turn'])})",
        "each attack alone: WAL (this database's, the server's), events published, answer",
    ]
    for one in figures["solo"]:
        lines.append(
            f"  {one['attack']:<19} {wal(one['wal']):>26}  {one['events']:>4} events {kib(one['eventBytes']):>11}"
            f"  answer {kib(one['answerBytes']):>10}  {one['outcome']}"
        )
    lines += [
        f"event buffers in Redis: largest {kib(max(buffers.values()))} of events "
        f"({kib(max(memory.values()))} MEMORY USAGE), bound {kib(figures['eventBufferBound'])}; "
        f"largest event {kib(figures['largestEvent'])}; largest answer {kib(figures['largestAnswer'])}",
        f"hostile sends: {dict(sorted(figures['hostileOutcomes'].items(), key=lambda kv: -kv[1]))}",
        *(f"  {said}: {error}" for said, error in sorted(figures["hostileErrors"].items()) if error),
        f"server errors: {figures['serverErrors']}",
        f"lowest balance seen ({figures['balanceSamples']} samples): {figures['lowestBalance']}",
        "checkledger: " + " | ".join(figures["checkledger"].split("\n")).strip(" |"),
    ]
    for game in sorted(billed):
        b, c = billed[game], charged.get(game, {})
        same = "equal" if b == c else "DIFFERENT"
        lines.append(
            f"{game}: billed {b['calls']} calls, {b['tokens']:,} tokens; "
            f"charged {c.get('calls')} calls, {c.get('tokens', 0):,} tokens ({same})"
        )
    lines.append(f"model answers: {figures['modelAnswers']}")
    lines.append(
        "invariants: " + ("all held" if status == 0 else f"the test FAILED (pytest exited {status})")
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of off, then on (default 5)")
    parser.add_argument("--turns", type=int, default=4, help="each player's sends in a round (default 4)")
    parser.add_argument("--quiet-sends", type=int, default=20, help="the quiet game's sends in a calm round")
    parser.add_argument(
        "--quiet-process",
        action="store_true",
        help="the quiet game on a web process of its own (how much of the slowdown is the shared process)",
    )
    args = parser.parse_args()
    load = os.getloadavg()
    figures, status = run(args.rounds, args.turns, args.quiet_sends, args.quiet_process)
    print("\n".join(report(figures, status, load)))
    sys.exit(status)


if __name__ == "__main__":
    main()
