"""Every benchmark, one table: measured value, target, met / not met.

    .venv/bin/python bench/run_all.py [--only a,b,c,d,e] [--quick] [--profile DIR]
                                      [--compaction-from-file] [--strict] [--json-out PATH]

(a) send_folded.py   platform overhead per send at 0, 200 and 10,000 total blocks
(b) agent_server.py  the agent-server workload through the REST API of a real server
(c) events.py        commit → WebSocket receipt of turn.finished
(d) throughput.py    50 agents, concurrent clients, a 200 ms model: turns/s against the ideal
(e) compaction.py    share of sends that waited on a compaction (another engineer's
                     benchmark, run here with fewer sends, or read from its results file)

Each runs as its own process and writes its own bench/results-<name>.json;
this prints the table and writes bench/results.json with every line, the
machine (cores, Python, PostgreSQL, date, commit) and each benchmark's
results. `--quick` runs each briefly (about 3 minutes in all; the numbers
are noisier). `--profile DIR` also profiles (a) in-process and the server
of (b) with pyinstrument (`pip install pyinstrument` into .venv). The exit
status is non-zero when a benchmark failed to run (with `--strict`, also
when a target is not met).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import benchlib  # noqa: E402

RESULTS_PATH = BENCH_DIR / "results.json"
ALL = ("a", "b", "c", "d", "e")
TIMEOUTS = {"a": 300, "b": 300, "c": 240, "d": 300, "e": 480}
# compaction.py is run through this file (see compaction_wrapper) on a
# database and SQLite file of run_all's own, so it never drops the
# studio_bench_compaction its author may be using at the same time.
COMPACTION_DB = "studio_bench_compaction_runall"
COMPACTION_SQLITE = Path("/tmp/studio-bench-compaction-runall.sqlite3")


POOL = "STUDIO_DB_POOL=1"
NO_POOL = "no pool, the default"
TWO_WEB = "2 web processes, STUDIO_DB_POOL=1"
SUFFIXES = {NO_POOL: "-nopool", TWO_WEB: "-2web"}


def plan(args) -> dict:
    """Each benchmark's runs: (variant, command line), full or --quick.
    The server benchmarks (b) and (d) run twice: with the PostgreSQL
    connection pool the README recommends for production web processes
    (STUDIO_DB_POOL=1), and with the default settings; (d) once more on two
    web processes, as the Procfile runs them."""
    q = args.quick
    profile = ["--profile", str(args.profile)] if args.profile else []
    b = ["--sequential", "100", "--per-agent", "25"] if q else ["--sequential", "200", "--per-agent", "50"]
    d = ["--clients", "50", "--seconds", "8"] if q else ["--clients", "50,10", "--seconds", "20"]
    return {
        "a": [
            (
                "",
                [
                    "send_folded.py",
                    *(["--sends", "50", "--warmup", "5"] if q else ["--sends", "200", "--warmup", "20"]),
                    *profile,
                ],
            )
        ],
        "b": [
            (POOL, ["agent_server.py", *b, "--db-pool", *profile]),
            (NO_POOL, ["agent_server.py", *b]),
        ],
        "c": [
            (
                POOL,
                [
                    "events.py",
                    *(
                        ["--sends", "60", "--loaded-sends", "30"]
                        if q
                        else ["--sends", "200", "--loaded-sends", "100"]
                    ),
                    "--db-pool",
                ],
            )
        ],
        "d": [
            (POOL, ["throughput.py", *d, "--db-pool"]),
            (NO_POOL, ["throughput.py", *d]),
            (TWO_WEB, ["throughput.py", *d, "--db-pool", "--web-processes", "2"]),
        ],
        "e": [
            (
                "",
                [
                    "compaction.py",
                    *(
                        ["--config", "scale", "--sends", "60", "--time-limit", "60"]
                        if q
                        else ["--config", "both", "--sends", "100", "--time-limit", "120"]
                    ),
                ],
            )
        ],
    }


NAMES = {"a": "send_folded", "b": "agent_server", "c": "events", "d": "throughput", "e": "compaction"}


def run_one(key: str, variant: str, command: list[str], args) -> tuple[dict | None, str | None]:
    script = command[0]
    suffix = SUFFIXES.get(variant, "")
    out = BENCH_DIR / f"results-{NAMES[key]}{suffix}.json"
    if key == "e":
        # Not the default results-compaction.json: that one holds the full
        # 500-send runs its author keeps.
        out = BENCH_DIR / "results-compaction-runall.json"
        if args.compaction_from_file:
            return read_compaction_file()
        extra = ["--output", str(out)]
    else:
        extra = ["--json-out", str(out)]
    out.unlink(missing_ok=True)
    if key == "e":
        full = [sys.executable, str(Path(__file__).resolve()), "--compaction-wrapper", *command[1:], *extra]
    else:
        full = [sys.executable, str(BENCH_DIR / script), *command[1:], *extra]
    print(f"\n== ({key}) {' '.join([script, *command[1:]])}", flush=True)
    began = time.monotonic()
    timeout = TIMEOUTS[key] * (2 if "--profile" in command else 1)
    # A session of its own, so a timeout ends the benchmark and whatever it
    # started (a server, a worker) by that one process group id.
    process = subprocess.Popen(full, cwd=REPO_ROOT, start_new_session=True)
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        code = f"timeout after {timeout} s"
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
    seconds = round(time.monotonic() - began, 1)
    if out.exists():
        data = json.loads(out.read_text())
        data.setdefault("elapsedSeconds", seconds)
        note = None if code == 0 else f"exit {code} (results kept)"
        return data, note
    return None, f"{script} failed ({code}) after {seconds} s"


def read_compaction_file() -> tuple[dict | None, str | None]:
    path = BENCH_DIR / "results-compaction.json"
    if not path.exists():
        return None, "bench/results-compaction.json not found (run without --compaction-from-file)"
    data = json.loads(path.read_text())
    age_h = (time.time() - path.stat().st_mtime) / 3600
    data["_source"] = f"{path.name}, {age_h:.1f} h old"
    return data, None


# --- lines of the table ----------------------------------------------------------------


def line(key, measure, value, target, met, detail=""):
    return {"id": key, "measure": measure, "value": value, "target": target, "met": met, "detail": detail}


def ms(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def lines_a(d: dict) -> list[dict]:
    rows = {(r["total"], r["variant"]): r for r in d["results"]}
    totals = sorted({r["total"] for r in d["results"]})
    plain = [rows[(t, "plain")]["p50Ms"] for t in totals]
    tool = [rows[(t, "1 tool call")]["p50Ms"] for t in totals]
    ratio = plain[-1] / plain[0]
    db = d["settings"]["db"] + (" + Redis" if d["settings"]["db"] == "postgres" else "")
    label = " / ".join(f"{t:,}" for t in totals)
    out = [
        line(
            "a",
            f"send overhead p50, plain, at {label} total blocks ({db}, scripted)",
            " / ".join(ms(x) for x in plain) + " ms",
            "≤ 5 ms each",
            all(x <= 5 for x in plain),
            f"p95 {' / '.join(ms(rows[(t, 'plain')]['p95Ms']) for t in totals)} ms; "
            f"{rows[(totals[-1], 'plain')]['queriesPerSend']} queries/send",
        ),
        line(
            "a",
            f"p50 at {totals[-1]:,} blocks ÷ p50 at {totals[0]} blocks (plain)",
            f"{ratio:.2f}×",
            "≤ 1.2×",
            ratio <= 1.2,
        ),
        line(
            "a",
            f"send overhead p50, 1 memory tool call, at {label} total blocks",
            " / ".join(ms(x) for x in tool) + " ms",
            "(reported)",
            None,
            f"{tool[-1] / tool[0]:.2f}× from {totals[0]} to {totals[-1]:,}",
        ),
    ]
    if d.get("seqScans"):
        tables = sorted({s["table"] for s in d["seqScans"]})
        out.append(
            line("a", "sequential scans of tables > 1,000 rows in one send", ", ".join(tables), "none", False)
        )
    return out


def lines_b(d: dict) -> list[dict]:
    s, c = d["sequential"], d["concurrent"]
    rss = d["rssEndMb"]
    return [
        line(
            "b",
            f"agent server: p50 per message, {s['messages']} sequential to one agent (p95 / p99)",
            f"{ms(s['p50Ms'])} ms ({ms(s['p95Ms'])} / {ms(s['p99Ms'])})",
            "p50 ≤ 9 ms",
            s["p50Ms"] <= 9,
            f"{s['messagesPerSecond']} msg/s; server CPU {s['cpu'].get('serverCpuMsPerUnit')} ms/msg; "
            f"{s['modelCallsPerMessage']} model calls/msg; {s['pgConnectionsPerMessage']} new PG connections/msg",
        ),
        line(
            "b",
            f"agent server: messages/s with {c['clients']} clients × {c['messagesPerClient']} (p50 / p95 / p99 ms)",
            f"{c['messagesPerSecond']} ({ms(c.get('p50Ms'))} / {ms(c.get('p95Ms'))} / {ms(c.get('p99Ms'))})",
            "≥ 200 msg/s",
            (c["messagesPerSecond"] or 0) >= 200 and not c["errors"],
            f"machine CPU {c['cpu'].get('machineCpuMsPerUnit')} ms/msg, busy {c['cpu'].get('machineBusyShare')}",
        ),
        line(
            "b",
            "agent server: mean of last 10 ÷ first 10 sequential messages",
            f"{s['last10OverFirst10']:.2f}× ({ms(s['first10MeanMs'])} → {ms(s['last10MeanMs'])} ms)",
            "≤ 1.1×",
            s["last10OverFirst10"] <= 1.1,
        ),
        line(
            "b",
            "agent server: server RSS at the end (peak)",
            f"{rss.get('VmRSS')} MB ({rss.get('VmHWM')})",
            "≤ 150 MB",
            (rss.get("VmRSS") or 1e9) <= 150,
            f"at start {d.get('rssAtStartMb', {}).get('VmRSS')} MB, after setup and warm-up "
            f"{d['rssAfterSetupMb'].get('VmRSS')} MB, after the sequential phase "
            f"{s['rssMb'].get('VmRSS')} MB",
        ),
    ]


def lines_c(d: dict) -> list[dict]:
    idle = d["idle"]
    out = [
        line(
            "c",
            f"event latency commit → WebSocket turn.finished, idle, p50 / p99 ({idle['n']} sends)",
            f"{ms(idle['p50Ms'])} / {ms(idle['p99Ms'])} ms",
            "p99 ≤ 25 ms",
            idle["p99Ms"] <= 25,
            f"from endedAt: {ms(idle['fromEndedAt']['p50Ms'])} / {ms(idle['fromEndedAt']['p99Ms'])} ms",
        )
    ]
    if "loaded" in d:
        loaded = d["loaded"]
        out.append(
            line(
                "c",
                f"event latency, {loaded['loadAgents']} other agents busy, p50 / p99 ({loaded['n']} sends)",
                f"{ms(loaded['p50Ms'])} / {ms(loaded['p99Ms'])} ms",
                "(reported)",
                None,
            )
        )
    return out


def lines_d(d: dict) -> list[dict]:
    out = []
    for index, run in enumerate(d["runs"]):
        out.append(
            line(
                "d",
                f"throughput, {run['agents']} agents, {run['clients']} clients, 200 ms model: turns/s (share of ideal)",
                f"{run['turnsPerSecond']} of {run['idealTurnsPerSecond']} ({run['shareOfIdeal'] * 100:.0f}%)",
                "≥ 80% of ideal" if index == 0 else "(reported)",
                (run["shareOfIdeal"] >= 0.8 and run["errors"] == 0) if index == 0 else None,
                f"p50 / p99 {ms(run.get('p50Ms'))} / {ms(run.get('p99Ms'))} ms per turn; {run['errors']} errors; "
                f"machine busy {run['cpu'].get('machineBusyShare')}",
            )
        )
    return out


def lines_e(d: dict) -> list[dict]:
    out = []
    for name, run in d["runs"].items():
        waits, sends = run["waits"], run["sends"]
        source = d.get("_source") or f"{d['settings']['sends']} sends, fresh run"
        problems = run.get("problems") or []
        out.append(
            line(
                "e",
                f"compaction ({name}): share of sends that waited on a compaction",
                f"{waits['share'] * 100:.1f}% ({waits['count']} of {sends['count']})",
                "(reported)",
                None,
                f"wait p50 / p95 {ms(waits.get('p50Ms'))} / {ms(waits.get('p95Ms'))} ms; send p50 "
                f"{ms(sends.get('p50Ms'))} ms; {sends.get('failed', 0)} failed; maxTokens "
                f"{d['settings']['maxTokens']}, {d['settings']['latencyMs']} ms model; {source}"
                + (f"; compaction.py reported: {'; '.join(problems)[:400]}" if problems else ""),
            )
        )
    return out


LINES = {"a": lines_a, "b": lines_b, "c": lines_c, "d": lines_d, "e": lines_e}


def verdict(met) -> str:
    return "—" if met is None else ("met" if met else "NOT MET")


def table(lines: list[dict]) -> str:
    out = ["| | Measure | Value | Target | |", "|---|---|---|---|---|"]
    for r in lines:
        out.append(f"| ({r['id']}) | {r['measure']} | {r['value']} | {r['target']} | {verdict(r['met'])} |")
    return "\n".join(out)


def slim(data: dict) -> dict:
    """A benchmark's results without the bulky parts (per-send latencies,
    SQL listings), which stay in its own results file."""
    text = json.dumps(data)
    data = json.loads(text)
    data.get("sequential", {}).pop("latenciesMs", None)
    for row in data.get("results", []) if isinstance(data.get("results"), list) else []:
        row.pop("queries", None)
    return data


def compaction_wrapper(argv: list[str]) -> int:
    """bench/compaction.py's main() with its database and SQLite file
    pointed at run_all's own (module constants; its child gets them through
    DATABASE_URL)."""
    import compaction

    compaction.POSTGRES_DB = COMPACTION_DB
    compaction.SQLITE_PATH = COMPACTION_SQLITE
    if hasattr(compaction, "LOCK_PATH"):  # one run_all (e) at a time, beside the author's own runs
        compaction.LOCK_PATH = COMPACTION_SQLITE.with_suffix(".lock")
    sys.argv = [str(BENCH_DIR / "compaction.py"), *argv]
    return compaction.main()


def main() -> int:
    if sys.argv[1:2] == ["--compaction-wrapper"]:
        return compaction_wrapper(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(ALL), help="benchmarks to run, e.g. a,c (default all)")
    parser.add_argument("--quick", action="store_true", help="a short run of each")
    parser.add_argument(
        "--profile", type=Path, help="profile (a) and (b) with pyinstrument into this directory"
    )
    parser.add_argument(
        "--compaction-from-file",
        action="store_true",
        help="(e): read bench/results-compaction.json instead of running compaction.py",
    )
    parser.add_argument("--strict", action="store_true", help="exit non-zero when a target is not met")
    parser.add_argument("--json-out", type=Path, default=RESULTS_PATH)
    args = parser.parse_args()
    only = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = set(only) - set(ALL)
    if unknown:
        parser.error(f"unknown benchmarks: {', '.join(sorted(unknown))} (choose from {', '.join(ALL)})")
    if args.profile:
        args.profile = args.profile.resolve()

    started = time.monotonic()
    machine = benchlib.machine_info()
    commands = plan(args)
    results, lines, failures = {}, [], []
    for key in only:
        for variant, command in commands[key]:
            tag = f" [{variant}]" if variant else ""
            data, note = run_one(key, variant, command, args)
            if data is None:
                failures.append(f"({key}){tag} {note}")
                lines.append(line(key, f"{NAMES[key]}{tag} did not run", note, "", False))
                continue
            results[NAMES[key] + SUFFIXES.get(variant, "")] = slim(data)
            try:
                got = LINES[key](data)
            except (KeyError, TypeError, ZeroDivisionError) as error:
                failures.append(f"({key}){tag} results unreadable: {error!r}")
                got = [line(key, f"{NAMES[key]}{tag}: results unreadable", repr(error), "", False)]
            for item in got:
                item["measure"] += tag
                item["config"] = variant
            if note:
                for item in got:
                    item["detail"] = f"{note}; {item['detail']}" if item["detail"] else note
            lines.extend(got)

    report = {
        "benchmark": "run_all",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "quick": args.quick,
        "only": only,
        "lines": lines,
        "failures": failures,
        "results": results,
        "loadAverageAtEnd": [round(x, 2) for x in os.getloadavg()],
        "elapsedSeconds": round(time.monotonic() - started, 1),
    }
    if args.profile:
        report["profileDir"] = str(args.profile)
    benchlib.write_json(args.json_out, report)

    m = machine
    print()
    print(table(lines))
    print()
    for r in lines:
        if r["detail"]:
            print(f"({r['id']}) {r['measure']}: {r['detail']}")
    print()
    print(
        f"{m['date']} · {m['cpuModel']} · {m['coresUsable']} cores · Python {m['python']} · PostgreSQL "
        f"{m['postgres']} · Redis {m['redis']} · commit {m['gitCommit']} · load {m['loadAverage']}"
        f"{' · QUICK' if args.quick else ''}"
    )
    print(f"wrote {args.json_out} in {report['elapsedSeconds']} s")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    if failures:
        return 1
    if args.strict and any(r["met"] is False for r in lines):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
