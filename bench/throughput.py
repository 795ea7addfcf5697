"""Throughput with many agents and a slow model: turns/s against the ideal.

    .venv/bin/python bench/throughput.py [--agents 50] [--clients 50[,10,…]] [--seconds 20]
                                         [--latency-ms 200] [--json-out PATH]

A studio server (Daphne, PostgreSQL `studio_bench_throughput`, Redis) whose
`scripted` model takes STUDIO_SCRIPTED_LATENCY_MS (200 ms) on every call.
One game, `--agents` agents (memory on). For each client count C, C client
threads each drive an agent of their own (http.client keep-alive, one
connection each) with back-to-back plain sends (one model call each) for
a warm-up of 3 s and then `--seconds` measured seconds. A turn counts when
its response arrives inside the measured window.

The ideal is C / model latency (each client waits out one model call per
turn and nothing else): 250 turns/s for 50 clients at 200 ms. Reported:
turns/s, its share of the ideal, per-turn latency p50/p95/p99 (the
platform adds its overhead and any queueing to the 200 ms), errors, the
server's CPU per turn and the machine's CPU use, and the server's RSS.
"""

import argparse
import sys
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import benchlib  # noqa: E402

RESULTS_PATH = BENCH_DIR / "results-throughput.json"
WARMUP_SECONDS = 3.0


def definition() -> dict:
    return benchlib.agent_definition("You are one of the townsfolk of Ashmere. Answer in character.")


def run_clients(
    server: benchlib.StudioServer, agents: list[str], clients: int, seconds: float, latency: float, log
):
    start = threading.Barrier(clients + 1)
    window: dict = {}
    results: dict = {}

    def client(slot: int) -> None:
        agent = agents[slot % len(agents)]
        api = server.api(timeout=120, process=slot)  # clients spread over the web processes
        api.call("GET", f"/api/v1/agents/{agent}")  # connect before the start
        samples, errors, index = [], [], 0
        start.wait()
        while True:
            began = time.perf_counter()
            if began >= window["end"]:
                break
            try:
                api.send(agent, benchlib.player_message(slot * 100_000 + index))
                done = time.perf_counter()
                if window["begin"] <= done < window["end"]:
                    samples.append(done - began)
            except Exception as error:  # noqa: BLE001 — counted, then go on
                errors.append(str(error)[:300])
                api.close()
                time.sleep(0.05)  # do not spin on a failing server
            index += 1
        results[slot] = (samples, errors)
        api.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    now = time.perf_counter()
    window["begin"] = now + WARMUP_SECONDS
    window["end"] = window["begin"] + seconds
    start.wait()
    time.sleep(max(0.0, window["begin"] - time.perf_counter()))
    meter = benchlib.CpuMeter(server.pids).start()
    time.sleep(max(0.0, window["end"] - time.perf_counter()))
    for thread in threads:
        thread.join(180)
    samples = [s for samples_, _ in results.values() for s in samples_]
    errors = [e for _, errors_ in results.values() for e in errors_]
    cpu = meter.stop(max(len(samples), 1))
    turns_per_second = len(samples) / seconds
    ideal = clients / latency
    out = {
        "clients": clients,
        "agents": len(agents),
        "seconds": seconds,
        "turns": len(samples),
        "turnsPerSecond": round(turns_per_second, 1),
        "idealTurnsPerSecond": round(ideal, 1),
        "shareOfIdeal": round(turns_per_second / ideal, 3),
        **benchlib.percentiles(samples),
        "errors": len(errors),
        "errorSamples": errors[:5],
        "cpu": cpu,
        "webProcesses": len(server.pids),
        "rssMb": server.status(),
    }
    log(
        f"{clients} clients: {out['turnsPerSecond']} turns/s of {out['idealTurnsPerSecond']} ideal "
        f"({out['shareOfIdeal'] * 100:.0f}%), p50 {out.get('p50Ms')} ms, p99 {out.get('p99Ms')} ms, "
        f"{len(errors)} errors, machine busy {cpu['machineBusyShare']}"
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--clients", default="50", help="client counts to run, comma-separated (default 50)")
    parser.add_argument(
        "--seconds", type=float, default=20, help="measured seconds per client count (default 20)"
    )
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument(
        "--web-processes",
        type=int,
        default=1,
        help="Daphne processes on the same database and Redis, clients spread over them (default 1)",
    )
    benchlib.add_db_pool_option(parser)
    parser.add_argument("--json-out", type=Path, default=RESULTS_PATH)
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",") if c.strip()]

    def log(text: str) -> None:
        benchlib.log("throughput", text)

    started = time.monotonic()
    report = {"benchmark": "throughput", "machine": benchlib.machine_info()}
    env = {"STUDIO_SCRIPTED_LATENCY_MS": str(args.latency_ms)}
    if args.db_pool:
        env["STUDIO_DB_POOL"] = "1"
    with benchlib.StudioServer("throughput", env=env) as server:
        for _ in range(args.web_processes - 1):
            server.add_web_process()
        log(f"{len(server.ports)} web process(es) up on {server.ports} in {server.setup_seconds} s")
        api = server.api()
        agents = [f"t{i:02d}" for i in range(args.agents)]
        for name in agents:
            api.define(name, definition())
        api.close()
        report["runs"] = [
            run_clients(server, agents, clients, args.seconds, args.latency_ms / 1000, log)
            for clients in counts
        ]
        report["rssEndMb"] = server.status()
    report["settings"] = {
        "agents": args.agents,
        "clients": counts,
        "seconds": args.seconds,
        "warmupSeconds": WARMUP_SECONDS,
        "latencyMs": args.latency_ms,
        "model": "scripted",
        "dbPool": args.db_pool,
        "webProcesses": args.web_processes,
    }
    report["elapsedSeconds"] = round(time.monotonic() - started, 1)
    benchlib.write_json(args.json_out, report)
    for run in report["runs"]:
        print(
            f"throughput: {run['clients']} clients, {run['agents']} agents: {run['turnsPerSecond']} turns/s "
            f"= {run['shareOfIdeal'] * 100:.0f}% of {run['idealTurnsPerSecond']} ideal; p50 {run.get('p50Ms')} ms"
        )
    print(f"wrote {args.json_out} in {report['elapsedSeconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
