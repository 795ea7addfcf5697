"""(b) The agent-server workload: messages through the REST API of a real
server, each making one memory tool call (`openai:bench` against
fake_openai_server.py) before the reply.

    .venv/bin/python bench/agent_server.py [--sequential 200] [--agents 4] [--per-agent 50]
                                           [--streamed 100] [--db-pool] [--json-out PATH]

Sequential: N messages to one agent; concurrent: K agents × M messages
from K client threads; streamed: S messages sent plain to one agent and S
with "stream": true to another, alternating in blocks. Each phase with the
fake's record of its model calls (prompt-cache prefix, input tokens). See
bench/README.md.
"""

import argparse
import json
import statistics
import sys
import threading
import time
from collections import defaultdict

import benchlib

SYSTEM_PROMPT = (
    "You are the keeper of the Ashmere campaign, the game master for one player, Mara. "
    "Keep the story straight and answer in character. Keep a memory named `notes` open: "
    "what Mara is trying to do right now, and who she has met."
)
NOTES = (
    "Mara is looking for her sister Ilsa. The silver key opens Ilsa's house on the mill road. "
    "Oskar the ferryman owes her a crossing; Brother Aldous hides something about the bell."
)


STREAM_BLOCK = 10  # messages in a row of one kind, plain or streamed


def setup_agent(api: benchlib.Api, name: str) -> None:
    # A system prompt of its own: the fake tells agents apart by it.
    api.define(name, f"{SYSTEM_PROMPT} This is table {name}.", model="openai:bench")
    create = {"name": "notes", "description": "What Mara is after, and who she has met", "content": NOTES}
    for tool, arguments in (("close_memory", create), ("open_memory", {"name": "notes"})):
        turn = api.send(name, f"(setup)\n@call {tool} {json.dumps(arguments)}")
        if len(turn["toolCalls"]) != 1 or turn["toolCalls"][0]["isError"]:
            raise benchlib.ApiError(f"setup of {name}: {turn['toolCalls']}")


def timed_send(api: benchlib.Api, agent: str, index: int, stream: bool = False) -> float:
    began = time.perf_counter()
    calls = api.send(agent, benchlib.player_message(index), stream=stream)["toolCalls"]
    elapsed = time.perf_counter() - began
    if len(calls) != 1 or calls[0]["name"] != "open_memory" or calls[0]["isError"]:
        raise benchlib.ApiError(f"message to {agent} made these tool calls: {calls}")
    return elapsed


def measured(server, fake, work) -> dict:
    """`work(meter)` → (latencies, wall seconds), the work starting the
    CPU meter as its clock starts; with CPU, new PostgreSQL connections and
    model calls per message, and what the model calls were given."""
    sessions, before = benchlib.pg_sessions(server.db_name), fake.stats()
    meter = benchlib.CpuMeter(server.pids)
    samples, wall = work(meter)
    n, cpu, opened = max(len(samples), 1), meter.stop(len(samples)), benchlib.pg_sessions(server.db_name)
    after = fake.stats(since=before["requests"])
    return {
        "messages": len(samples),
        **benchlib.percentiles(samples),
        "wallSeconds": round(wall, 3),
        "messagesPerSecond": round(len(samples) / wall, 1) if wall else None,
        "modelCallsPerMessage": round(len(after["calls"]) / n, 3),
        "modelConnectionsPerMessage": round((after["connections"] - before["connections"]) / n, 3),
        "pgConnectionsPerMessage": round((opened - sessions) / n, 3),
        "cpu": cpu,
        "modelInput": model_input(after["calls"], n),
        "rssMb": server.rss(),
    }


def model_input(calls: list[dict], messages: int) -> dict:
    """Of each call compared with its agent's previous one, the share of its
    input that is a byte-identical prefix of that one (`share*`, by the step
    it answers: a player's message or a tool result) and the share of that
    one it starts with (`previousKept*`: below 1 only when the studio
    changed what it had sent before); input tokens per message and call."""
    seen = [c for c in calls if c["previous"]]
    shares = [c["prefix"] / c["bytes"] for c in seen]
    out = {"calls": len(calls), "compared": len(seen), "late": sum(c["late"] for c in calls)}
    if len(shares) > 1:
        out |= {"shareMedian": statistics.median(shares), "shareMin": min(shares)}
        out |= {"shareP5": statistics.quantiles(shares, n=20, method="inclusive")[0]}
        for step, name in (("user", "Message"), ("tool", "ToolResult")):
            of_step = [c["prefix"] / c["bytes"] for c in seen if c["after"] == step]
            out[f"shareMinAfter{name}"] = min(of_step, default=None)
        out["previousKeptMin"] = min(c["prefix"] / c["previous"] for c in seen)
    out = {key: round(value, 4) if isinstance(value, float) else value for key, value in out.items()}
    tokens = sum(c["tokens"] for c in calls)
    return out | {
        "inputTokensPerMessage": round(tokens / messages, 1),
        "inputTokensPerCall": round(tokens / max(len(calls), 1), 1),
    }


def workload(server, fake, args, log) -> dict:
    agents = [f"c{i}" for i in range(args.agents)]
    result = {"rssAtStartMb": server.rss()}  # up, ready: imports done, no send yet
    api = server.api()
    for name in ["warm", "seq", *agents, "plain", "sse"]:
        setup_agent(api, name)
    for index in range(args.warmup):
        timed_send(api, "warm", index)
    result["rssAfterSetupMb"] = server.rss()

    seq_samples: list[float] = []

    def sequential(meter):
        meter.start()
        seq_samples.extend(timed_send(api, "seq", index) for index in range(args.sequential))
        return seq_samples, sum(seq_samples)

    seq = result["sequential"] = measured(server, fake, sequential)
    api.close()
    first, last = (sum(part) / len(part) for part in (seq_samples[:10], seq_samples[-10:]))
    seq.update(first10MeanMs=round(first * 1000, 3), last10MeanMs=round(last * 1000, 3))
    seq.update(last10OverFirst10=round(last / first, 3), latenciesMs=[round(s * 1e3, 3) for s in seq_samples])
    log(f"sequential: p50 {seq['p50Ms']:.2f} ms, last 10 ÷ first 10 {last / first:.2f}")

    barrier, per_client, errors = threading.Barrier(len(agents) + 1), defaultdict(list), []

    def client(agent: str) -> None:
        own = server.api()
        own.call("GET", f"/api/v1/agents/{agent}")  # connected before the start
        barrier.wait()
        try:
            per_client[agent] += [timed_send(own, agent, 1000 + i) for i in range(args.per_agent)]
        except Exception as error:  # noqa: BLE001 — reported below
            errors.append(f"{agent}: {error}")
        own.close()

    def concurrent(meter):
        threads = [threading.Thread(target=client, args=(agent,)) for agent in agents]
        for thread in threads:
            thread.start()
        barrier.wait()
        began = meter.start().t0
        for thread in threads:
            thread.join()
        return [s for samples in per_client.values() for s in samples], time.perf_counter() - began

    conc = result["concurrent"] = measured(server, fake, concurrent)
    conc.update(clients=len(agents), messagesPerClient=args.per_agent, errors=errors)
    log(f"concurrent: {len(agents)} × {args.per_agent}, {conc['messagesPerSecond']} msg/s")
    if errors:
        raise RuntimeError(f"concurrent phase failed: {errors[:3]}")
    if args.streamed:
        result["streamed"] = streamed(server, fake, args.streamed)
        log(f"streamed: {result['streamed']['extraServerCpuMsPerMessage']} ms more server CPU per message")
    result["rssEndMb"] = server.rss()
    return result


def streamed(server, fake, count: int) -> dict:
    """`count` messages to `plain` and as many with "stream": true (the
    whole event stream read) to `sse`, set up alike, in alternating blocks,
    each block metered: the server's CPU per message of each kind."""
    api, calls = server.api(), fake.stats()["requests"]
    cpu, samples = {False: 0.0, True: 0.0}, {False: [], True: []}
    for number, first in enumerate(range(0, count, STREAM_BLOCK)):
        for stream in (False, True) if number % 2 == 0 else (True, False):
            agent, indexes = ("sse" if stream else "plain"), range(first, min(first + STREAM_BLOCK, count))
            meter = benchlib.CpuMeter(server.pids).start()
            samples[stream] += [timed_send(api, agent, 2000 + index, stream) for index in indexes]
            cpu[stream] += meter.stop(1)["serverCpuSeconds"]
    api.close()
    out = {"messagesEach": count, "block": STREAM_BLOCK}
    for name, stream in (("plain", False), ("streamed", True)):
        out[name] = benchlib.percentiles(samples[stream]) | {
            "serverCpuMsPerMessage": round(cpu[stream] * 1e3 / count, 3)
        }
    out["extraServerCpuMsPerMessage"] = round((cpu[True] - cpu[False]) * 1e3 / count, 3)
    return out | {"modelInput": model_input(fake.stats(since=calls)["calls"], 2 * count)}


def run(args, log) -> dict:
    report = {}
    with benchlib.FakeOpenAI() as fake:
        # `openai:bench` has no price row: it is billed at the `*` row's price.
        env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "bench"}
        env |= {"STUDIO_ALLOW_UNPRICED_MODELS": "1"} | ({"STUDIO_DB_POOL": "1"} if args.db_pool else {})
        with benchlib.StudioServer("agent_server", env=env) as server:
            log(f"server up on :{server.port} in {server.setup_seconds} s")
            report.update(workload(server, fake, args, log))
    seq, conc, rss = report["sequential"], report["concurrent"], report["rssEndMb"]
    report["summary"] = [
        f"agent server: sequential p50 {seq['p50Ms']:.2f} / p95 {seq['p95Ms']:.2f} / p99 {seq['p99Ms']:.2f} ms, "
        f"last10/first10 {seq['last10OverFirst10']}; {conc['clients']} clients: {conc['messagesPerSecond']} msg/s; "
        f"RSS {rss.get('VmRSS')} MB (peak {rss.get('VmHWM')} MB)"
    ]
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=200, help="messages to one agent (default 200)")
    parser.add_argument("--agents", type=int, default=4, help="concurrent clients, an agent each (default 4)")
    parser.add_argument("--per-agent", type=int, default=50, help="messages per client (default 50)")
    parser.add_argument("--streamed", type=int, default=100, help="messages plain and streamed (0: none)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--db-pool", action="store_true", help="serve with STUDIO_DB_POOL=1")
    return benchlib.main("agent_server", parser, run)


if __name__ == "__main__":
    sys.exit(main())
