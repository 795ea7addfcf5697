"""(d) Throughput with many agents and a slow model: turns/s against the ideal.

    .venv/bin/python bench/throughput.py [--agents 50] [--clients 50[,10,…]] [--seconds 20]
                                         [--latency-ms 200] [--web-processes N] [--db-pool] [--json-out PATH]

C client threads, each driving an agent of its own with back-to-back
sends: 3 s of warm-up, then `--seconds` counted. The ideal is C / model
latency. See bench/README.md.
"""

import argparse
import itertools
import sys
import threading
import time

import benchlib

WARMUP_SECONDS = 3.0


def run_clients(server, agents: list[str], clients: int, seconds: float, latency: float, log) -> dict:
    start, samples, errors = threading.Barrier(clients + 1), [], []

    def client(slot: int) -> None:
        agent, api = agents[slot % len(agents)], server.api(process=slot)
        api.call("GET", f"/api/v1/agents/{agent}")  # connected before the start
        start.wait()
        for index in itertools.count():
            began = time.perf_counter()
            if began >= end:
                break
            try:
                api.send(agent, benchlib.player_message(slot * 100_000 + index))
                if begin <= (done := time.perf_counter()) < end:
                    samples.append(done - began)
            except Exception as error:  # noqa: BLE001 — counted, then go on
                errors.append(str(error)[:300])
                api.close()
                time.sleep(0.05)  # do not spin on a failing server
        api.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    begin = time.perf_counter() + WARMUP_SECONDS  # the clients read the window after the barrier
    end = begin + seconds
    start.wait()
    time.sleep(max(0.0, begin - time.perf_counter()))
    meter = benchlib.CpuMeter(server.pids).start()
    time.sleep(max(0.0, end - time.perf_counter()))
    for thread in threads:
        thread.join(180)
    cpu, rate, ideal = meter.stop(len(samples)), len(samples) / seconds, clients / latency
    out = {"clients": clients, "agents": len(agents), "seconds": seconds, "turns": len(samples)}
    out |= {"turnsPerSecond": round(rate, 1), "idealTurnsPerSecond": round(ideal, 1)}
    out["shareOfIdeal"] = round(rate / ideal, 3)
    out.update(benchlib.percentiles(samples), errors=len(errors), errorSamples=errors[:5], cpu=cpu)
    out.update(webProcesses=len(server.pids), rssMb=server.rss())
    log(
        f"{clients} clients: {out['turnsPerSecond']} turns/s of {out['idealTurnsPerSecond']} "
        f"({out['shareOfIdeal'] * 100:.0f}%), {len(errors)} errors, machine busy {cpu['machineBusyShare']}"
    )
    return out


def run(args, log) -> dict:
    env = {"STUDIO_SCRIPTED_LATENCY_MS": str(args.latency_ms)}
    env |= {"STUDIO_DB_POOL": "1"} if args.db_pool else {}
    with benchlib.StudioServer("throughput", env=env) as server:
        for _ in range(args.web_processes - 1):
            server.add_web_process()
        api = server.api()
        agents = [f"t{i:02d}" for i in range(args.agents)]
        for name in agents:
            api.define(name, "You are one of the townsfolk of Ashmere. Answer in character.")
        api.close()
        counts = [int(c) for c in args.clients.split(",")]
        runs = [run_clients(server, agents, c, args.seconds, args.latency_ms / 1000, log) for c in counts]
    summary = [
        f"throughput: {r['clients']} clients: {r['turnsPerSecond']} turns/s = {r['shareOfIdeal'] * 100:.0f}% "
        f"of {r['idealTurnsPerSecond']}; p50 {r.get('p50Ms')} ms"
        for r in runs
    ]
    return {"runs": runs, "summary": summary}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--clients", default="50", help="client counts to run, comma-separated (default 50)")
    parser.add_argument("--seconds", type=float, default=20, help="counted seconds per client count")
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--web-processes", type=int, default=1, help="Daphne processes (default 1)")
    parser.add_argument("--db-pool", action="store_true", help="serve with STUDIO_DB_POOL=1")
    return benchlib.main("throughput", parser, run)


if __name__ == "__main__":
    sys.exit(main())
