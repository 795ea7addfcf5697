"""Every benchmark, one table: measured value, target, met / not met.

    .venv/bin/python bench/run_all.py [--only a,b,c,d,e] [--quick]
                                      [--compaction-from-file] [--strict] [--json-out PATH]

(a) send_overhead.py, (b) agent_server.py, (c) events.py, (d) throughput.py,
(e) compaction.py, each in a process (and session) of its own, writing
bench/results-<script>[-variant].json; then the table, and
bench/results.json with every line, the machine and each one's results.
See bench/README.md.
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

import benchlib

BENCH_DIR = benchlib.BENCH_DIR
SCRIPTS = {"a": "send_overhead", "b": "agent_server", "c": "events", "d": "throughput", "e": "compaction"}
TIMEOUTS = {"a": 300, "b": 300, "c": 240, "d": 300, "e": 480}
POOL, NO_POOL, TWO_WEB = "STUDIO_DB_POOL=1", "no pool, the default", "2 web processes, STUDIO_DB_POOL=1"
SUFFIXES = {POOL: "", NO_POOL: "-nopool", TWO_WEB: "-2web"}
# Each benchmark's arguments, in full and with --quick.
FULL = {
    "a": "--sends 200 --warmup 20",
    "b": "--sequential 200 --per-agent 50 --streamed 100",
    "c": "--sends 200 --loaded-sends 100",
}
FULL |= {"d": "--clients 50,10 --seconds 20", "e": "--sends 100 --time-limit 120"}
QUICK = {
    "a": "--sends 50 --warmup 5",
    "b": "--sequential 100 --per-agent 25 --streamed 50",
    "c": "--sends 60 --loaded-sends 30",
}
QUICK |= {"d": "--clients 50 --seconds 8", "e": "--config scale --sends 60 --time-limit 60"}
# Its runs: (variant, arguments of the variant). The server benchmarks run with
# the connection pool the README recommends for production web processes; (b)
# and (d) also with the default settings, (d) once more on two web processes,
# as the Procfile runs them. (e) runs on databases of its own, so it never drops
# the studio_bench_compaction its author keeps.
VARIANTS = {"a": [("", "")], "b": [(POOL, "--db-pool"), (NO_POOL, "")], "c": [(POOL, "--db-pool")]}
VARIANTS |= {"d": [(POOL, "--db-pool"), (NO_POOL, ""), (TWO_WEB, "--db-pool --web-processes 2")]}
VARIANTS |= {"e": [("", "--name compaction_runall")]}
# The variant whose lines are judged against the targets (issue 16): the
# others' are reported.
JUDGED = {"b": POOL, "d": TWO_WEB}


def run_one(key: str, variant: str, arguments: list[str]) -> tuple[dict | None, str | None]:
    script = f"{SCRIPTS[key]}.py"
    out = BENCH_DIR / f"results-{SCRIPTS[key]}{SUFFIXES.get(variant, '')}{'-runall' * (key == 'e')}.json"
    out.unlink(missing_ok=True)
    print(f"\n== ({key}) {' '.join([script, *arguments])}", flush=True)
    began = time.monotonic()
    timeout = TIMEOUTS[key]
    command = [sys.executable, str(BENCH_DIR / script), *arguments, "--json-out", str(out)]
    process = subprocess.Popen(command, cwd=benchlib.REPO_ROOT, start_new_session=True)
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        code = f"timeout after {timeout} s"
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, None)):
            try:
                os.killpg(process.pid, sig)
                process.wait(wait)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
    seconds = round(time.monotonic() - began, 1)
    if not out.exists():
        return None, f"{script} failed ({code}) after {seconds} s"
    return json.loads(out.read_text()), None if code == 0 else f"exit {code} (results kept)"


# --- lines of the table ----------------------------------------------------------------------


def line(key, measure, value, target, met, detail=""):
    return {"id": key, "measure": measure, "value": value, "target": target, "met": met, "detail": detail}


def ms(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def pct(x) -> str:
    return "—" if x is None else f"{x * 100:.1f}%"


def lines_a(d: dict) -> list[dict]:
    rows = {(r["total"], r["variant"]): r for r in d["results"]}
    totals = sorted({r["total"] for r in d["results"]})
    plain, tool = ([rows[(t, v)]["p50Ms"] for t in totals] for v in ("plain", "1 tool call"))
    at, db = f"at {' / '.join(f'{t:,}' for t in totals)} total blocks", d["settings"]["db"]
    p95 = " / ".join(ms(rows[(t, "plain")]["p95Ms"]) for t in totals)
    measure = f"send overhead p50, plain, {at} ({db}{' + Redis' * (db == 'postgres')}, scripted)"
    out = [
        line(
            "a", measure, " / ".join(map(ms, plain)) + " ms", "≤ 6 ms each", max(plain) <= 6, f"p95 {p95} ms"
        )
    ]
    plain_q, tool_q = (max(rows[(t, v)]["queriesPerSend"] for t in totals) for v in ("plain", "1 tool call"))
    measure = "statements per send, plain / with 1 memory tool call (BEGIN, COMMIT not counted)"
    detail = "the most at any total; " + ", ".join(
        f"{t:,}: {rows[(t, 'plain')]['queriesPerSend']} / {rows[(t, '1 tool call')]['queriesPerSend']}"
        for t in totals
    )
    control = (rows[(totals[0], v)].get("transactionControlPerSend") for v in ("plain", "1 tool call"))
    detail += "; transaction control {} / {}".format(*control)
    out.append(
        line("a", measure, f"{plain_q} / {tool_q}", "≤ 8 / ≤ 12", plain_q <= 8 and tool_q <= 12, detail)
    )
    measure, ratio = f"p50 at {totals[-1]:,} blocks ÷ p50 at {totals[0]} blocks (plain)", plain[-1] / plain[0]
    out.append(line("a", measure, f"{ratio:.2f}×", "≤ 1.2×", ratio <= 1.2))
    measure, value = f"send overhead p50, 1 memory tool call, {at}", " / ".join(map(ms, tool)) + " ms"
    detail = f"{tool[-1] / tool[0]:.2f}× from {totals[0]} to {totals[-1]:,}"
    out.append(line("a", measure, value, "(reported)", None, detail))
    if "identicalDefinition" in d:
        same = d["identicalDefinition"]
        measure = (
            f"an identical definition (PUT /agents/{{name}} again), at {totals[-1]:,} blocks: p50, statements"
        )
        value = f"{ms(same['p50Ms'])} ms, {same['statements']}"
        out.append(line("a", measure, value, "(reported; 1 statement)", None, f"p95 {ms(same['p95Ms'])} ms"))
    if d.get("seqScans"):
        tables = ", ".join(sorted({s["table"] for s in d["seqScans"]}))
        out.append(line("a", "sequential scans of tables > 1,000 rows in one send", tables, "none", False))
    return out


def lines_b(d: dict) -> list[dict]:
    s, c, rss = d["sequential"], d["concurrent"], d["rssEndMb"]
    cpu = [phase["cpu"]["serverCpuMsPerUnit"] for phase in (s, c)]
    measure = f"agent server: server CPU per message, sequential ({c['clients']} clients)"
    detail = f"machine CPU {s['cpu']['machineCpuMsPerUnit']} ({c['cpu']['machineCpuMsPerUnit']}) ms/msg"
    out = [line("b", measure, f"{cpu[0]} ({cpu[1]}) ms", "≤ 10 ms each", max(cpu) <= 10, detail)]
    measure = f"agent server: p50 per message, {s['messages']} sequential to one agent (p95 / p99)"
    value = f"{ms(s['p50Ms'])} ms ({ms(s['p95Ms'])} / {ms(s['p99Ms'])})"
    detail = (
        f"{s['messagesPerSecond']} msg/s; {s['modelCallsPerMessage']} model calls/msg; new connections/msg: "
        f"{s['pgConnectionsPerMessage']} to PostgreSQL, {s.get('modelConnectionsPerMessage')} to the model"
    )
    out.append(line("b", measure, value, "≤ 12 ms", s["p50Ms"] <= 12, detail))
    measure = f"agent server: messages/s with {c['clients']} clients × {c['messagesPerClient']} (p50 / p95 / p99 ms)"
    value = f"{c['messagesPerSecond']} ({ms(c['p50Ms'])} / {ms(c['p95Ms'])} / {ms(c['p99Ms'])})"
    detail = f"machine busy {c['cpu']['machineBusyShare']}"
    out.append(
        line("b", measure, value, "≥ 80 msg/s", c["messagesPerSecond"] >= 80 and not c["errors"], detail)
    )
    measure = "agent server: mean of last 10 ÷ first 10 sequential messages"
    value = f"{s['last10OverFirst10']:.2f}× ({ms(s['first10MeanMs'])} → {ms(s['last10MeanMs'])} ms)"
    out.append(line("b", measure, value, "≤ 1.15×", s["last10OverFirst10"] <= 1.15))
    detail = (
        f"at start {d['rssAtStartMb']['VmRSS']} MB, after setup and warm-up {d['rssAfterSetupMb']['VmRSS']} MB, "
        f"after the sequential phase {s['rssMb']['VmRSS']} MB"
    )
    value = f"{rss['VmRSS']} MB ({rss['VmHWM']})"
    out.append(
        line(
            "b", "agent server: server RSS at the end (peak)", value, "≤ 150 MB", rss["VmRSS"] <= 150, detail
        )
    )
    phases = {"sequential": s, "concurrent": c} | ({"streamed": d["streamed"]} if "streamed" in d else {})
    m = s["modelInput"]
    measure = "agent server: share of a model call's input that repeats its previous call's (p5 over the calls, sequential)"
    value = f"{pct(m.get('shareP5'))} (median {pct(m.get('shareMedian'))}, min {pct(m.get('shareMin'))})"
    detail = "; ".join(
        f"{name}: p5 / median / min {pct(p['modelInput'].get('shareP5'))} / {pct(p['modelInput'].get('shareMedian'))}"
        f" / {pct(p['modelInput'].get('shareMin'))}, previous input kept: min {pct(p['modelInput'].get('previousKeptMin'))}"
        for name, p in phases.items()
    )
    late = sum(p["modelInput"]["late"] for p in phases.values())
    detail += f"; {late} calls recorded out of order" * bool(late)
    met = (m.get("shareP5") or 0) >= 0.95 and not late
    out.append(line("b", measure, value, "≥ 95%", met, detail))
    measure = "agent server: model input tokens per message (per call), sequential"
    value = f"{m['inputTokensPerMessage']:,.0f} ({m['inputTokensPerCall']:,.0f})"
    detail = "; ".join(
        f"{name}: {p['modelInput']['inputTokensPerMessage']:,.0f} ({p['modelInput']['inputTokensPerCall']:,.0f})"
        for name, p in phases.items()
    )
    out.append(line("b", measure, value, "(reported)", None, detail))
    if "streamed" in d:
        t = d["streamed"]
        plain, streamed = t["plain"], t["streamed"]
        measure = f'agent server: server CPU per message with "stream": true over without ({t["messagesEach"]} each)'
        value = f"{t['extraServerCpuMsPerMessage']:+.2f} ms ({streamed['serverCpuMsPerMessage']} vs {plain['serverCpuMsPerMessage']})"
        detail = f"p50 {ms(streamed['p50Ms'])} vs {ms(plain['p50Ms'])} ms; alternating blocks of {t['block']}"
        out.append(line("b", measure, value, "≤ +1 ms", t["extraServerCpuMsPerMessage"] <= 1, detail))
    return out


def lines_c(d: dict) -> list[dict]:
    idle, loaded = d["idle"], d.get("loaded")
    measure = f"event latency commit → WebSocket turn.finished, idle, p50 / p99 ({idle['n']} sends)"
    value, ended = f"{ms(idle['p50Ms'])} / {ms(idle['p99Ms'])} ms", idle["fromEndedAt"]
    detail = f"from endedAt: {ms(ended['p50Ms'])} / {ms(ended['p99Ms'])} ms"
    out = [line("c", measure, value, "p99 ≤ 25 ms", idle["p99Ms"] <= 25, detail)]
    if loaded:
        measure = f"event latency, {loaded['loadAgents']} other agents busy, p50 / p99 ({loaded['n']} sends)"
        out.append(
            line("c", measure, f"{ms(loaded['p50Ms'])} / {ms(loaded['p99Ms'])} ms", "(reported)", None)
        )
    return out


def lines_d(d: dict) -> list[dict]:
    out = []
    for r in d["runs"]:
        measure = f"throughput, {r['agents']} agents, {r['clients']} clients, 200 ms model: turns/s (share of ideal)"
        value = f"{r['turnsPerSecond']} of {r['idealTurnsPerSecond']} ({r['shareOfIdeal'] * 100:.0f}%)"
        detail = (
            f"p50 / p99 {ms(r.get('p50Ms'))} / {ms(r.get('p99Ms'))} ms per turn; {r['errors']} errors; "
            f"machine busy {r['cpu']['machineBusyShare']}"
        )
        met = r["shareOfIdeal"] >= 0.5 and r["errors"] == 0
        out.append(
            line("d", measure, value, *(("(reported)", None) if out else ("≥ 50% of ideal", met)), detail)
        )
    return out


def lines_e(d: dict) -> list[dict]:
    settings, source = d["settings"], d.get("_source") or f"{d['settings']['sends']} sends, fresh run"
    out = []
    for name, r in d["runs"].items():
        waits, sends = r["waits"], r["sends"]
        value = f"{waits['share'] * 100:.1f}% ({waits['count']} of {sends['count']})"
        detail = (
            f"wait p50 / p95 {ms(waits.get('p50Ms'))} / {ms(waits.get('p95Ms'))} ms; send p50 {ms(sends['p50Ms'])} "
            f"ms; {sends['failed']} failed; maxTokens {settings['maxTokens']}, {settings['latencyMs']} ms model; "
            f"{source}" + "".join(f"; compaction.py reported: {p}"[:400] for p in r["problems"])
        )
        out.append(
            line(
                "e",
                f"compaction ({name}): share of sends that waited on a compaction",
                value,
                "(reported)",
                None,
                detail,
            )
        )
    return out


LINES = {"a": lines_a, "b": lines_b, "c": lines_c, "d": lines_d, "e": lines_e}


def slim(data: dict) -> dict:
    """A benchmark's results without the bulky parts (per-send latencies,
    SQL listings), which stay in its own results file."""
    data = json.loads(json.dumps(data))
    data.get("sequential", {}).pop("latenciesMs", None)
    for row in data["results"] if isinstance(data.get("results"), list) else []:
        row.pop("queries", None)
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="a,b,c,d,e", help="benchmarks to run, e.g. a,c (default all)")
    parser.add_argument("--quick", action="store_true", help="a short run of each")
    parser.add_argument("--compaction-from-file", action="store_true", help="(e): read its results file")
    parser.add_argument("--strict", action="store_true", help="exit non-zero when a target is not met")
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "results.json")
    args = parser.parse_args()
    only = [k.strip() for k in args.only.split(",") if k.strip()]
    if set(only) - set(SCRIPTS):
        parser.error(f"unknown benchmarks: {', '.join(sorted(set(only) - set(SCRIPTS)))} (choose from a–e)")

    started, machine = time.monotonic(), benchlib.machine_info()
    results, lines, failures = {}, [], []
    for key in only:
        for variant, extra in VARIANTS[key]:
            tag, path = f" [{variant}]" if variant else "", BENCH_DIR / "results-compaction.json"
            arguments = (QUICK if args.quick else FULL)[key].split() + extra.split()
            if key == "e" and args.compaction_from_file:
                data, note = (json.loads(path.read_text()), None) if path.exists() else (None, f"no {path}")
                if data:
                    data["_source"] = f"{path.name}, {(time.time() - path.stat().st_mtime) / 3600:.1f} h old"
            else:
                data, note = run_one(key, variant, arguments)
            if data is None:
                failures.append(f"({key}){tag} {note}")
                lines.append(line(key, f"{SCRIPTS[key]}{tag} did not run", note, "", False))
                continue
            results[SCRIPTS[key] + SUFFIXES.get(variant, "")] = slim(data)
            try:
                got = LINES[key](data)
            except (KeyError, TypeError, ZeroDivisionError) as error:
                failures.append(f"({key}){tag} results unreadable: {error!r}")
                got = [line(key, f"{SCRIPTS[key]}{tag}: results unreadable", repr(error), "", False)]
            for item in got:
                item.update(measure=item["measure"] + tag, config=variant)
                if JUDGED.get(key, variant) != variant and item["met"] is not None:
                    item.update(met=None, target=f"({item['target']} judged on [{JUDGED[key]}])")
                item["detail"] = "; ".join(filter(None, [note, item["detail"]]))
            lines.extend(got)

    report = {
        "benchmark": "run_all",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
    }
    report.update(quick=args.quick, only=only, lines=lines, failures=failures, results=results)
    report.update(loadAverageAtEnd=[round(x, 2) for x in os.getloadavg()])
    report["elapsedSeconds"] = round(time.monotonic() - started, 1)
    benchlib.write_json(args.json_out, report)

    verdict = {None: "—", True: "met", False: "NOT MET"}
    print("\n| | Measure | Value | Target | |\n|---|---|---|---|---|")
    for r in lines:
        print(f"| ({r['id']}) | {r['measure']} | {r['value']} | {r['target']} | {verdict[r['met']]} |")
    print()
    for r in lines:
        if r["detail"]:
            print(f"({r['id']}) {r['measure']}: {r['detail']}")
    m = machine
    print(
        f"\n{m['date']} · {m['cpuModel']} · {m['coresUsable']} cores · Python {m['python']} · PostgreSQL "
        f"{m['postgres']} · Redis {m['redis']} · commit {m['gitCommit']} · load {m['loadAverage']}"
        f"{' · QUICK' if args.quick else ''}"
    )
    print(f"wrote {args.json_out} in {report['elapsedSeconds']} s")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    if failures:
        return 1
    return 2 if args.strict and any(r["met"] is False for r in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
