"""The agent-server workload: messages through the REST API of a real studio
server, each making one memory tool call before the reply.

    .venv/bin/python bench/agent_server.py [--sequential 200] [--agents 4] [--per-agent 50]
                                           [--profile DIR] [--json-out PATH]

A fresh PostgreSQL database (`studio_bench_agent_server`), Redis, and Daphne
serving `studio.asgi:application` (STUDIO_SEND_RATE=100000/s, compactions
only queued). The agents use the `openai` provider (`openai:bench`) against
bench/fake_openai_server.py on loopback, which answers at once: the first
model call of a message asks for `open_memory` of the agent's open memory
`notes`, the second (whose last message is that tool's result) replies. So
every message is 2 model calls, 1 tool call and 1 memory access fee.

Phases (client: http.client keep-alive, one connection per client thread):
1. define the agents (PUT), give each a memory `notes` and open it (2
   sends), 10 untimed warm-up messages to an agent of their own;
2. sequential: N messages to one agent, one after another;
3. concurrent: K agents × M messages, K client threads, one agent each.

Reported: p50/p95/p99 ms per message and messages/s per phase, the
server's RSS (VmRSS; VmHWM is the peak), the mean of the last 10 messages
of the sequential phase over its first 10, the server's and the machine's
CPU per message, and the PostgreSQL connections the server opened per
message (pg_stat_database.sessions).

With `--profile DIR` a second server runs the same workload (smaller)
under pyinstrument — every thread the server starts gets its own profiler
(the request threads Django runs sync views in, the model-call threads)
and the main thread (Twisted's reactor, Django's async handler) one more —
and the reports go to DIR/agent_server-*.txt. Timings of that run are not
reported: profiling slows it down.

`--serve-profiled DIR -- <daphne args>` is that launcher (used by
benchlib.StudioServer).
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

RESULTS_PATH = BENCH_DIR / "results-agent-server.json"
SYSTEM_PROMPT = (
    "You are the keeper of the Ashmere campaign, the game master for one player, Mara. "
    "Keep the story straight and answer in character. Keep a memory named `notes` open: "
    "what Mara is trying to do right now, and who she has met."
)
NOTES = (
    "Mara is looking for her sister Ilsa. The silver key opens Ilsa's house on the mill road. "
    "Oskar the ferryman owes her a crossing; Brother Aldous hides something about the bell."
)


def definition() -> dict:
    return benchlib.agent_definition(SYSTEM_PROMPT, model="openai:bench")


def setup_agent(api: benchlib.Api, name: str) -> None:
    import json

    api.define(name, definition())
    create = {"name": "notes", "description": "What Mara is after, and who she has met", "content": NOTES}
    for call in (("close_memory", create), ("open_memory", {"name": "notes"})):
        turn = api.send(name, f"(setup)\n@call {call[0]} {json.dumps(call[1])}")
        if len(turn["toolCalls"]) != 1 or turn["toolCalls"][0]["isError"]:
            raise benchlib.ApiError(f"setup of {name}: {turn['toolCalls']}")


def timed_send(api: benchlib.Api, agent: str, index: int) -> float:
    began = time.perf_counter()
    turn = api.send(agent, benchlib.player_message(index))
    elapsed = time.perf_counter() - began
    calls = turn["toolCalls"]
    if len(calls) != 1 or calls[0]["name"] != "open_memory" or calls[0]["isError"]:
        raise benchlib.ApiError(f"message to {agent} made these tool calls: {calls}")
    return elapsed


def run_workload(server: benchlib.StudioServer, fake: benchlib.FakeOpenAI, args, log) -> dict:
    seq_agent, conc_agents = "seq", [f"c{i}" for i in range(args.agents)]
    rss_at_start = server.status()  # up, one GET answered: imports done, no send yet
    api = server.api()
    for name in ["warm", seq_agent, *conc_agents]:
        setup_agent(api, name)
    for index in range(args.warmup):
        timed_send(api, "warm", index)
    result: dict = {"rssAtStartMb": rss_at_start, "rssAfterSetupMb": server.status()}

    # Sequential: one agent, one message after another.
    sessions0 = benchlib.pg_sessions(server.db_name)
    fake0 = fake.stats()
    meter = benchlib.CpuMeter(server.pid).start()
    samples = [timed_send(api, seq_agent, index) for index in range(args.sequential)]
    cpu = meter.stop(args.sequential)
    fake1 = fake.stats()
    sessions1 = benchlib.pg_sessions(server.db_name)
    first = sum(samples[:10]) / min(10, len(samples))
    last = sum(samples[-10:]) / min(10, len(samples))
    result["sequential"] = {
        "messages": len(samples),
        **benchlib.percentiles(samples),
        "messagesPerSecond": round(len(samples) / sum(samples), 1),
        "first10MeanMs": round(first * 1000, 3),
        "last10MeanMs": round(last * 1000, 3),
        "last10OverFirst10": round(last / first, 3),
        "modelCallsPerMessage": round((fake1["requests"] - fake0["requests"]) / len(samples), 3),
        "pgConnectionsPerMessage": (
            round((sessions1 - sessions0) / len(samples), 3) if None not in (sessions0, sessions1) else None
        ),
        "cpu": cpu,
        "rssMb": server.status(),
        "latenciesMs": [round(s * 1000, 3) for s in samples],
    }
    api.close()
    log(
        f"sequential: {len(samples)} messages, p50 {result['sequential']['p50Ms']:.2f} ms, "
        f"p99 {result['sequential']['p99Ms']:.2f} ms, last10/first10 {result['sequential']['last10OverFirst10']}"
    )

    # Concurrent: K client threads, one agent and one keep-alive connection each.
    barrier = threading.Barrier(len(conc_agents) + 1)
    per_thread: dict = {}
    errors: list = []

    def client(agent: str) -> None:
        own = server.api()
        own.call("GET", f"/api/v1/agents/{agent}")  # connect before the start
        barrier.wait()
        out = []
        try:
            for index in range(args.per_agent):
                out.append(timed_send(own, agent, 1000 + index))
        except Exception as error:  # noqa: BLE001 — reported below
            errors.append(f"{agent}: {error}")
        per_thread[agent] = out
        own.close()

    threads = [threading.Thread(target=client, args=(a,)) for a in conc_agents]
    for thread in threads:
        thread.start()
    sessions0 = benchlib.pg_sessions(server.db_name)
    fake0 = fake.stats()
    barrier.wait()
    meter = benchlib.CpuMeter(server.pid).start()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    total = sum(len(v) for v in per_thread.values())
    cpu = meter.stop(max(total, 1))
    fake1 = fake.stats()
    sessions1 = benchlib.pg_sessions(server.db_name)
    pooled = [s for v in per_thread.values() for s in v]
    result["concurrent"] = {
        "clients": len(conc_agents),
        "messagesPerClient": args.per_agent,
        "messages": total,
        "errors": errors,
        **benchlib.percentiles(pooled),
        "wallSeconds": round(wall, 3),
        "messagesPerSecond": round(total / wall, 1) if wall else None,
        "modelCallsPerMessage": round((fake1["requests"] - fake0["requests"]) / max(total, 1), 3),
        "pgConnectionsPerMessage": (
            round((sessions1 - sessions0) / max(total, 1), 3) if None not in (sessions0, sessions1) else None
        ),
        "cpu": cpu,
        "rssMb": server.status(),
    }
    log(
        f"concurrent: {len(conc_agents)}x{args.per_agent}, {result['concurrent']['messagesPerSecond']} msg/s, "
        f"p50 {result['concurrent'].get('p50Ms')} ms, p99 {result['concurrent'].get('p99Ms')} ms"
    )
    if errors:
        raise RuntimeError(f"concurrent phase failed: {errors[:3]}")
    result["rssEndMb"] = server.status()
    result["fakeOpenAI"] = fake.stats()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=200, help="messages to one agent (default 200)")
    parser.add_argument(
        "--agents", type=int, default=4, help="concurrent clients, one agent each (default 4)"
    )
    parser.add_argument(
        "--per-agent", type=int, default=50, help="messages per concurrent client (default 50)"
    )
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--profile", type=Path, help="also profile the server; reports go to this directory")
    benchlib.add_db_pool_option(parser)
    parser.add_argument("--json-out", type=Path, default=RESULTS_PATH)
    parser.add_argument("--serve-profiled", type=Path, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.serve_profiled:
        return serve_profiled(args.serve_profiled, [a for a in rest if a != "--"])
    if rest:
        parser.error(f"unknown arguments: {rest}")

    def log(text: str) -> None:
        benchlib.log("agent_server", text)

    started = time.monotonic()
    report = {"benchmark": "agent_server", "machine": benchlib.machine_info()}
    with benchlib.FakeOpenAI() as fake:
        # `openai:bench` has no price row: it is billed at the `*` row's price.
        env = {
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_API_KEY": "bench",
            "STUDIO_ALLOW_UNPRICED_MODELS": "1",
        }
        if args.db_pool:
            env["STUDIO_DB_POOL"] = "1"
        with benchlib.StudioServer("agent_server", env=env) as server:
            log(f"server up on :{server.port} (pid {server.pid}) in {server.setup_seconds} s")
            report.update(run_workload(server, fake, args, log))
        if args.profile:
            report["profile"] = profile_run(fake, env, args, log)
    report["settings"] = {
        "sequential": args.sequential,
        "agents": args.agents,
        "perAgent": args.per_agent,
        "warmup": args.warmup,
        "model": "openai:bench (loopback fake, no latency)",
        "toolCallsPerMessage": 1,
        "dbPool": args.db_pool,
    }
    report["elapsedSeconds"] = round(time.monotonic() - started, 1)
    benchlib.write_json(args.json_out, report)
    seq, conc = report["sequential"], report["concurrent"]
    print(
        f"agent server: sequential p50 {seq['p50Ms']:.2f} / p95 {seq['p95Ms']:.2f} / p99 {seq['p99Ms']:.2f} ms, "
        f"{seq['messagesPerSecond']} msg/s, last10/first10 {seq['last10OverFirst10']}; "
        f"{conc['clients']} clients: p50 {conc['p50Ms']:.2f} / p99 {conc['p99Ms']:.2f} ms, "
        f"{conc['messagesPerSecond']} msg/s; RSS {report['rssEndMb'].get('VmRSS')} MB "
        f"(peak {report['rssEndMb'].get('VmHWM')} MB)"
    )
    print(f"wrote {args.json_out} in {report['elapsedSeconds']} s")
    return 0


def profile_run(fake, env: dict, args, log) -> dict:
    outdir = args.profile.resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    for old in outdir.glob("agent_server-*"):
        old.unlink()
    small = argparse.Namespace(
        sequential=min(args.sequential, 100),
        agents=args.agents,
        per_agent=min(args.per_agent, 25),
        warmup=args.warmup,
    )
    with benchlib.StudioServer("agent_server_profile", env=env, profile=outdir) as server:
        log(
            f"profiled server up on :{server.port}; {small.sequential} + {small.agents}x{small.per_agent} messages"
        )
        run_workload(server, fake, small, log)
    summary_path = outdir / "agent_server-summary.json"
    deadline = time.monotonic() + 60
    while not summary_path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not summary_path.exists():
        log(f"the profiled server wrote no report; its log:\n{server.log_tail()}")
        return {}
    import json

    return json.loads(summary_path.read_text())


# --- the profiling launcher (runs inside the server process) --------------------------------


def _thread_kind(name: str) -> str:
    if name.startswith("ThreadPoolExecutor"):
        return "request-threads"
    if name.startswith("model-call"):
        return "model-call-threads"
    return "other-threads"


def serve_profiled(outdir: Path, daphne_args: list[str]) -> int:
    """Daphne in this process with pyinstrument on every thread: one
    profiler per thread the server starts (kept when the thread ends) and
    one on the main thread (the reactor). Reports are written on SIGINT."""
    import json
    from collections import defaultdict

    import profile_report
    from pyinstrument import Profiler
    from pyinstrument.session import Session

    sys.path.insert(0, str(REPO_ROOT))
    sessions: dict = defaultdict(list)
    counts: dict = defaultdict(int)
    lock = threading.Lock()
    original_run = threading.Thread.run

    def run(self):
        profiler = Profiler(interval=0.0002, async_mode="disabled")
        try:
            profiler.start()
        except Exception:  # noqa: BLE001 — never break the server
            return original_run(self)
        try:
            original_run(self)
        finally:
            try:
                profiler.stop()
                kind = _thread_kind(self.name)
                with lock:
                    counts[kind] += 1
                    if profiler.last_session is not None:
                        sessions[kind].append(profiler.last_session)
            except Exception:  # noqa: BLE001
                pass

    threading.Thread.run = run
    main_profiler = Profiler(interval=0.0005, async_mode="disabled")
    main_profiler.start()
    from daphne.cli import CommandLineInterface

    try:
        CommandLineInterface().run(daphne_args)
    finally:
        main_profiler.stop()
        threading.Thread.run = original_run
        outdir.mkdir(parents=True, exist_ok=True)
        summary = {"threadsProfiled": dict(counts)}
        summary["main-thread"] = profile_report.write(
            main_profiler.last_session, outdir / "agent_server-main-thread.txt", title="Daphne main thread"
        )
        with lock:
            groups = {k: list(v) for k, v in sessions.items()}
        for kind, items in groups.items():
            combined = items[0]
            for other in items[1:]:
                combined = Session.combine(combined, other)
            summary[kind] = profile_report.write(
                combined, outdir / f"agent_server-{kind}.txt", title=f"{len(items)} {kind} of the server"
            )
        (outdir / "agent_server-summary.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
