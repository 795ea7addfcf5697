"""Players at once on one web process, with a slow model: how many a web
process serves, said plainly.

    .venv/bin/python bench/players.py [--players 50,200,500] [--latency-ms 2000]
                                      [--web-processes 1] [--again] [--json-out PATH]

N players send at the same moment, each to a character of their own that
has never been sent to (an agent without memory: one model call a send),
the model (`openai:bench` against fake_openai_server.py) answering each
call `--latency-ms` after it arrives. Per N: the wall time from the start
to the last answer against the ideal (the model's latency: every call
waited on at once), the time the studio adds to a send (its answer's time
less the model's latency, p50/p95), the web process's threads and RSS at
their peak, its CPU per send, and the sends that failed. With `--again`,
the same N players then send once more at once, each to the same
character (a warm send): the web process's CPU per first send against per
warm send. With a model of 8 s or slower, also the CPU a send costs while
it only waits. See bench/README.md.
"""

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import benchlib

# The shortest model latency whose wait `waiting_cpu` measures: 40% of it
# comfortably past the sends' own work at a few hundred players.
WAITING_FROM_SECONDS = 8.0

# Put on the server's PYTHONPATH as sitecustomize: the CPU the garbage
# collector's full passes take in the server (each timed on its thread),
# written to STUDIO_GC_OUT.<pid> when the server is sent SIGUSR2.
GC_HOOK = """
import os
if os.environ.get("STUDIO_GC_OUT"):
    import gc, json, signal, time
    _spent, _began = [0.0, 0], [0.0]

    def _timed(phase, info):
        if info["generation"] != 2:
            return
        if phase == "start":
            _began[0] = time.thread_time()
        else:
            _spent[0] += time.thread_time() - _began[0]
            _spent[1] += 1

    def _write(*_):
        path = f"{os.environ['STUDIO_GC_OUT']}.{os.getpid()}"
        with open(path + ".part", "w") as out:
            json.dump(_spent, out)
        os.replace(path + ".part", path)

    gc.callbacks.append(_timed)
    signal.signal(signal.SIGUSR2, _write)
"""

SYSTEM_PROMPT = "You are a character in the Ashmere campaign; answer the player in character, briefly."


def define(server, players: int, log) -> list[str]:
    """`players` characters, and one more sent to once: the provider's SDK
    loads on the process's first call, which no round should pay for."""
    api, names = server.api(), [f"p{index:04d}" for index in range(players)]
    for name in ["warmup", *names]:
        status, body = api.call(
            "PUT",
            f"/api/v1/agents/{name}",
            {"systemPrompt": f"{SYSTEM_PROMPT} ({name})", "model": "openai:bench"},
        )
        if status not in (200, 201):
            raise benchlib.ApiError(f"define {name}: HTTP {status}: {body}")
    api.send("warmup", "Warm-up: the provider's SDK loads on the first call.")
    api.close()
    log(f"{players} characters defined")
    return names


# Where the servers `run` starts write their full passes (None: no hook, as
# for another benchmark's server that rounds_of is given).
_gc_out: Path | None = None


def full_passes(server) -> tuple[float, int] | None:
    """The garbage collector's full passes in the web process(es) so far:
    their CPU seconds and their number (GC_HOOK)."""
    if _gc_out is None:
        return None
    seconds, passes = 0.0, 0
    for pid in server.pids:
        path = Path(f"{_gc_out}.{pid}")
        path.unlink(missing_ok=True)
        os.kill(pid, signal.SIGUSR2)
        for _ in range(200):  # written by the server's main thread, between two of its loop's turns
            if path.exists():
                spent, count = json.loads(path.read_text())
                seconds, passes = seconds + spent, passes + count
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"web process {pid} did not write its garbage collector's passes")
    return seconds, passes


class Peaks:
    """The web processes' threads and RSS, sampled every 50 ms: their peaks."""

    def __init__(self, pids: list[int]):
        self.pids, self.threads, self.rss_mb, self.done = pids, 0, 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Peaks":
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.done.wait(0.05):
            for pid in self.pids:
                status = dict(
                    line.split(":", 1)
                    for line in open(f"/proc/{pid}/status").read().splitlines()
                    if ":" in line
                )
                self.threads = max(self.threads, int(status["Threads"]))
                self.rss_mb = max(self.rss_mb, int(status["VmRSS"].split()[0]) / 1024)

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(5)


def round_of(server, names: list[str], latency: float, log, label: str = "") -> dict:
    """A send at once to each of `names`, each from a client of its own."""
    players = len(names)
    clients = [server.api(process=index) for index in range(players)]
    start, took, errors = threading.Barrier(players + 1), [], []

    def player(index: int) -> None:
        clients[index].call("GET", f"/api/v1/agents/{names[index]}")  # connected before the start
        start.wait()
        began = time.perf_counter()
        try:
            clients[index].send(names[index], benchlib.player_message(index))
            took.append(time.perf_counter() - began)
        except Exception as error:  # noqa: BLE001 — counted
            errors.append(str(error)[:300])
        clients[index].close()

    threads = [threading.Thread(target=player, args=(i,), daemon=True) for i in range(players)]
    for thread in threads:
        thread.start()
    with Peaks(server.pids) as peaks:
        gc_before = full_passes(server)
        start.wait()
        meter = benchlib.CpuMeter(server.pids).start()
        waiting = waiting_cpu(server, players, latency)
        for thread in threads:
            thread.join(600)
        cpu = meter.stop(players)
        gc_after = full_passes(server)
    added = [max(seconds - latency, 0.0) for seconds in took]
    out = {"players": players, "wallSeconds": cpu["wallSeconds"], "idealSeconds": latency}
    out["wallOverIdeal"] = round(cpu["wallSeconds"] / latency, 2)
    out["addedMs"] = benchlib.percentiles(added)
    out |= {"errors": len(errors), "errorSamples": errors[:5], "threadsPeak": peaks.threads}
    out |= {"rssPeakMb": round(peaks.rss_mb, 1), "cpu": cpu, "waitingCpuMsPerSendSecond": waiting}
    if gc_before is not None and gc_after is not None:
        out["fullGcPasses"] = gc_after[1] - gc_before[1]
        out["fullGcMsPerSend"] = round((gc_after[0] - gc_before[0]) * 1000 / players, 3)
    log(
        f"{players} players{label}: {out['wallSeconds']:.1f} s (ideal {latency:g} s), added p50 "
        f"{out['addedMs'].get('p50Ms', 0) / 1000:.2f} s / p95 {out['addedMs'].get('p95Ms', 0) / 1000:.2f} s, "
        f"{peaks.threads} threads, {out['rssPeakMb']} MB, {len(errors)} errors, "
        f"server CPU {cpu['serverCpuMsPerUnit']:.1f} ms a send"
        + (
            f" ({out['fullGcMsPerSend']:.2f} in {out['fullGcPasses']} full garbage-collector passes)"
            if "fullGcPasses" in out
            else ""
        )
        + f", machine busy {cpu['machineBusyShare']:.0%}"
        + ("" if waiting is None else f", {waiting:.3f} ms of CPU a second per send waiting on the model")
    )
    return out


def waiting_cpu(server, players: int, latency: float) -> float | None:
    """The web process's CPU while every send waits on the model (from 40%
    to 90% of its latency, past the sends' own work), in ms a second per
    waiting send; None for a model quicker than WAITING_FROM_SECONDS."""
    if latency < WAITING_FROM_SECONDS:
        return None
    time.sleep(0.4 * latency)
    meter = benchlib.CpuMeter(server.pids).start()
    time.sleep(0.5 * latency)
    used = meter.stop(players)
    return round(used["serverCpuSeconds"] * 1000 / (players * used["wallSeconds"]), 4)


def rounds_of(server, names: list[str], counts: list[int], latency: float, again: bool, log) -> list[dict]:
    """For each N, N characters of their own (none sent to before) sent to
    at once; with `again`, the same N at once once more (their second send)."""
    rounds, start = [], 0
    for players in counts:
        mine = names[start : start + players]
        start += players
        first = round_of(server, mine, latency, log)
        if again:
            first["again"] = round_of(server, mine, latency, log, label=" again")
            warm = first["again"]["cpu"]["serverCpuMsPerUnit"]
            first["firstOverAgainCpu"] = round(first["cpu"]["serverCpuMsPerUnit"] / warm, 3) if warm else None
        rounds.append(first)
    return rounds


def run(args, log) -> dict:
    counts = [int(n) for n in args.players.split(",")]
    latency = args.latency_ms / 1000
    env = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": "bench", "STUDIO_ALLOW_UNPRICED_MODELS": "1"}
    # As the Procfile runs a web process; one game holds every player, so its
    # limit of live turns (64 by default) is raised past the largest N.
    env |= {"STUDIO_DB_POOL": "1", "STUDIO_MAX_LIVE_TURNS_PER_GAME": str(max(counts) + 10)}
    # Every round has characters of its own: more definitions than a game may make in a minute.
    env["STUDIO_DEFINITION_RATE"] = "100000/min"
    global _gc_out
    hook = Path(tempfile.mkdtemp(prefix="studio-players-"))
    (hook / "sitecustomize.py").write_text(GC_HOOK)
    _gc_out = hook / "gc"
    env["STUDIO_GC_OUT"] = str(_gc_out)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))
    with benchlib.FakeOpenAI(latency_ms=args.latency_ms) as fake:
        env["OPENAI_BASE_URL"] = fake.base_url
        with benchlib.StudioServer("players", env=env) as server:
            for _ in range(args.web_processes - 1):
                server.add_web_process()
            log(f"{args.web_processes} web process(es) up in {server.setup_seconds} s")
            names = define(server, sum(counts), log)
            rounds = rounds_of(server, names, counts, latency, args.again, log)
    summary = [
        f"{r['players']} players, {args.web_processes} web process(es), a {latency:g} s model: "
        f"{r['wallSeconds']:.1f} s against {latency:g} s ideal ({r['wallOverIdeal']}×), the studio adds "
        f"p50 {r['addedMs'].get('p50Ms', 0) / 1000:.2f} s / p95 {r['addedMs'].get('p95Ms', 0) / 1000:.2f} s; "
        f"{r['threadsPeak']} threads, {r['rssPeakMb']:.0f} MB at the peak; {r['errors']} errors; "
        f"server CPU {r['cpu']['serverCpuMsPerUnit']:.1f} ms a send"
        + (
            f" (again: {r['again']['cpu']['serverCpuMsPerUnit']:.1f} ms, {r['again']['wallSeconds']:.1f} s, "
            f"{r['again']['errors']} errors)"
            if "again" in r
            else ""
        )
        for r in rounds
    ]
    failed = any(r["errors"] or r.get("again", {}).get("errors") for r in rounds)
    return {"rounds": rounds, "summary": summary, "failed": failed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--players", default="50,200,500", help="players at once, per round (default 50,200,500)"
    )
    parser.add_argument("--latency-ms", type=int, default=2000, help="the model's latency (default 2000)")
    parser.add_argument("--web-processes", type=int, default=1, help="Daphne processes (default 1)")
    parser.add_argument(
        "--again", action="store_true", help="each round's players send once more at once (warm sends)"
    )
    return benchlib.main("players", parser, run)


if __name__ == "__main__":
    sys.exit(main())
