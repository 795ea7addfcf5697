"""Two checkouts' (b) servers side by side: before / after a change.

    .venv/bin/python bench/paired.py BEFORE_DIR AFTER_DIR [--messages 170] [--stream a,b]

Each checkout (a worktree: `git worktree add /tmp/before HEAD~1`) serves
the studio from its own code on a database of its own, both against one
fake model; one client sends the (b) message to A, then to B, and so on.
Both servers' CPU is read over the same stretch of time, so the machine's
drift — tens of percent between runs on these VMs — falls on both alike,
where alternating whole runs (`agent_server.py`) only averages it out.
Prints each server's CPU per message, p50 and RSS, and B over A. Run it
twice with the two directories swapped: the pairing's own bias (A/A on one
checkout) is about ±2%.

`--stream b` sends B's messages with "stream": true (both directories
may be the same checkout: streamed against plain, same code).

`--past-window` first sends each agent past the forced checkpoint's window
(200 blocks), untimed: with compaction off its forced compaction stays
queued, so every timed turn ends as an agent's turns do while its
compaction is still to run (the window found full, the live compaction
looked up).
"""

import argparse
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

import benchlib
from agent_server import setup_agent, timed_send
from launcher import free_port


def server_env(name: str, fake: benchlib.FakeOpenAI) -> dict:
    """The environment of a (b) server on a fresh database `name`, against `fake`."""
    return benchlib.django_env(
        benchlib.db_recreate("postgres", postgres=name, sqlite=Path()),
        drop=("STUDIO_", "DJANGO_", "OPENAI_"),
        redis=benchlib.REDIS_URL,
        channels=name,
        STUDIO_COMPACTION_RUNNER="none",
        STUDIO_SEND_RATE="100000/s",
        STUDIO_DB_POOL="1",
        STUDIO_ALLOW_UNPRICED_MODELS="1",
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY="bench",
    )


def daphne_start(
    checkout: Path, env: dict, application: str, name: str, probe: str, data: bytes | None = None
) -> tuple[subprocess.Popen, int]:
    """Daphne serving `application` from `checkout` on a free port, once a
    request to `probe` (a POST of `data`, when given) answers; its output in
    /tmp/`name`.log."""
    port = free_port()
    daphne = [benchlib.PYTHON, "-m", "daphne", "--verbosity", "0", "-b", "127.0.0.1", "-p", str(port)]
    with open(f"/tmp/{name}.log", "w") as log:
        process = subprocess.Popen(
            [*daphne, application], cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(
                urllib.request.Request(f"http://127.0.0.1:{port}{probe}", data=data), timeout=5
            )
            return process, port
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"{checkout}'s server did not start: see /tmp/{name}.log") from None
            time.sleep(0.1)


def serve(checkout: Path, tag: str, fake: benchlib.FakeOpenAI) -> tuple[subprocess.Popen, benchlib.Api]:
    name = f"{benchlib.DB_PREFIX}_paired{tag}"
    env = server_env(name, fake)
    manage = [benchlib.PYTHON, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=checkout, env=env, check=True)
    created = subprocess.run(
        [*manage, "creategame", "bench", "--credits", "1000000000"],
        cwd=checkout,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    process, port = daphne_start(checkout, env, "studio.asgi:application", name, "/readyz")
    return process, benchlib.Api(port, created.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    # Warm-up and messages together stay under the forced checkpoint's 200
    # blocks: past it, with compaction off, every turn takes the forced path.
    parser.add_argument("--messages", type=int, default=170)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--stream", default="", help="a, b or a,b: whose messages are streamed")
    parser.add_argument("--past-window", action="store_true", help="time turns past the 200-block window")
    args = parser.parse_args()
    if args.past_window:
        args.warmup = max(args.warmup, 205)
    elif args.warmup + args.messages >= 200:
        parser.error("--warmup plus --messages must stay under 200 (the forced checkpoint's window)")
    streamed = [tag in args.stream.split(",") for tag in "ab"]
    with benchlib.FakeOpenAI() as fake:
        servers = []
        try:
            for checkout, tag in ((args.a, "a"), (args.b, "b")):
                servers.append(serve(checkout.resolve(), tag, fake))
            for (_, api), stream in zip(servers, streamed, strict=True):
                setup_agent(api, "npc")
                for index in range(args.warmup):
                    timed_send(api, "npc", index, stream)
            cpu_before = [benchlib.cpu_seconds(process.pid) for process, _ in servers]
            latencies: list[list[float]] = [[], []]
            for index in range(args.messages):
                for side, ((_, api), stream) in enumerate(zip(servers, streamed, strict=True)):
                    latencies[side].append(timed_send(api, "npc", args.warmup + index, stream))
            cpu = [
                benchlib.cpu_seconds(p.pid) - before
                for (p, _), before in zip(servers, cpu_before, strict=True)
            ]
            for side, (checkout, (process, _)) in enumerate(zip((args.a, args.b), servers, strict=True)):
                print(
                    f"{'AB'[side]} {checkout}{' (streamed)' if streamed[side] else ''}: "
                    f"server CPU {cpu[side] * 1000 / args.messages:.2f} ms per message, "
                    f"p50 {statistics.median(latencies[side]) * 1000:.2f} ms, "
                    f"RSS {benchlib.proc_status(process.pid)['VmRSS']} MB"
                )
            p50 = [statistics.median(side) for side in latencies]
            print(f"B / A: CPU {cpu[1] / cpu[0]:.3f}, p50 {p50[1] / p50[0]:.3f}")
        finally:
            for process, _ in servers:
                process.terminate()
                process.wait(10)


if __name__ == "__main__":
    main()
