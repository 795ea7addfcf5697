"""(b)'s message beside its floor: the studio's server CPU per message,
and what the same input and output cost on this stack with nothing else.

    .venv/bin/python bench/floor.py [--messages 170] [--statements 23] [--calls 2] [--events 4] [--parts]

Two Daphne servers, both against one fake model: the studio (as
`paired.py` serves it, the agent set up as (b) sets it up) and the floor
(bench/floor_site.py: the same request path, without middleware, with one
view that makes `--statements` round trips to PostgreSQL, `--calls`
streamed model calls without the SDK, and `--events` Redis script calls:
by default, what a (b) message makes). One client sends the (b) message to
the studio, then the same body to the floor, and so on; both servers' CPU
is read over the same stretch of time. Prints each server's CPU per
message, the studio's over the floor's, and each server's CPU thread by
thread (the event loop, Daphne's, is the main thread; the studio's others
are the request's, the model calls', the event publisher's, the
wake-ups'). With `--parts`, then the floor's parts, each alone (a bare
request; the request and the round trips; and so on), in phases one after
the other.
"""

import argparse
import http.client
import json
import os
import subprocess
from pathlib import Path

import benchlib
from agent_server import setup_agent, timed_send
from paired import daphne_start, serve, server_env


def floor_serve(fake: benchlib.FakeOpenAI) -> tuple[subprocess.Popen, int]:
    """The floor's server: the (b) server's environment, floor_site's settings."""
    name = f"{benchlib.DB_PREFIX}_floor"
    env = server_env(name, fake) | {
        "DJANGO_SETTINGS_MODULE": "floor_site",
        "PYTHONPATH": str(benchlib.BENCH_DIR),
    }
    return daphne_start(
        benchlib.REPO_ROOT, env, "floor_site:application", name, "/message", b'{"content": "hi"}'
    )


class Floor:
    """One keep-alive connection to the floor's server."""

    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def send(self, index: int, statements: int, calls: int, events: int) -> None:
        body = json.dumps({"content": benchlib.player_message(index)}).encode()
        query = f"statements={statements}&calls={calls}&events={events}"
        headers = {"Content-Type": "application/json", "Authorization": "Bearer floor"}
        self.conn.request("POST", f"/message?{query}", body=body, headers=headers)
        response = self.conn.getresponse()
        answer = response.read()
        if response.status != 200:
            raise benchlib.ApiError(f"the floor answered HTTP {response.status}: {answer[:300]!r}")


def thread_ticks(pid: int) -> dict[int, int]:
    """CPU ticks (user + system) of each of process `pid`'s threads."""
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
        ticks[int(tid)] = int(fields[11]) + int(fields[12])
    return ticks


def threads_line(pid: int, before: dict, after: dict, messages: int) -> str:
    """The threads that used CPU between `before` and `after`, most first, in ms per message."""
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    used = sorted(((after[t] - before.get(t, 0), t) for t in after), reverse=True)
    parts = [
        f"{'the event loop' if tid == pid else 'thread ' + str(index)} {ticks * tick_ms / messages:.2f}"
        for index, (ticks, tid) in enumerate(used, 1)
        if ticks
    ]
    return ", ".join(parts)


def per_message(pid: int, messages: int, send) -> float:
    before = benchlib.cpu_seconds(pid)
    for index in range(messages):
        send(index)
    return (benchlib.cpu_seconds(pid) - before) * 1000 / messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Warm-up and messages together stay under the forced checkpoint's 200 blocks (as in paired.py).
    parser.add_argument("--messages", type=int, default=170)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--statements", type=int, default=23, help="round trips to PostgreSQL per message")
    parser.add_argument("--calls", type=int, default=2, help="streamed model calls per message")
    parser.add_argument("--events", type=int, default=4, help="Redis script calls per message")
    parser.add_argument("--parts", action="store_true", help="then each of the floor's parts alone")
    args = parser.parse_args()
    if args.warmup + args.messages >= 200:
        parser.error("--warmup plus --messages must stay under 200 (the forced checkpoint's window)")
    shape = (args.statements, args.calls, args.events)
    with benchlib.FakeOpenAI() as fake:
        processes = []
        try:
            studio, api = serve(benchlib.REPO_ROOT, "floor_studio", fake)
            processes.append(studio)
            floor_process, port = floor_serve(fake)
            processes.append(floor_process)
            floor = Floor(port)
            setup_agent(api, "npc")
            for index in range(args.warmup):
                timed_send(api, "npc", index)
                floor.send(index, *shape)
            cpu0 = [benchlib.cpu_seconds(p.pid) for p in processes]
            threads0 = [thread_ticks(p.pid) for p in processes]
            for index in range(args.messages):
                timed_send(api, "npc", args.warmup + index)
                floor.send(index, *shape)
            threads1 = [thread_ticks(p.pid) for p in processes]
            studio_ms, floor_ms = (
                (benchlib.cpu_seconds(p.pid) - before) * 1000 / args.messages
                for p, before in zip(processes, cpu0, strict=True)
            )
            print(f"studio: server CPU {studio_ms:.2f} ms per message (bench (b)'s message)")
            print(
                f"floor:  server CPU {floor_ms:.2f} ms per message "
                f"({args.statements} round trips, {args.calls} model calls, {args.events} Redis calls)"
            )
            print(
                f"studio / floor: {studio_ms / floor_ms:.3f}; above the floor: {studio_ms - floor_ms:.2f} ms"
            )
            for label, process, before, after in zip(
                ("studio", "floor"), processes, threads0, threads1, strict=True
            ):
                print(
                    f"{label}, by thread (ms per message): {threads_line(process.pid, before, after, args.messages)}"
                )
            if args.parts:
                parts = {
                    "a bare request": (0, 0, 0),
                    f"+ {args.statements} round trips": (args.statements, 0, 0),
                    f"+ {args.calls} model calls": (0, args.calls, 0),
                    f"+ {args.events} Redis calls": (0, 0, args.events),
                }
                bare = None
                for label, part in parts.items():
                    ms = per_message(
                        floor_process.pid, args.messages, lambda i, part=part: floor.send(i, *part)
                    )
                    extra = "" if bare is None else f" ({ms - bare:+.2f} ms over the bare request)"
                    bare = ms if bare is None else bare
                    print(f"floor, {label}: {ms:.2f} ms per message{extra}")
        finally:
            for process in processes:
                process.terminate()
                process.wait(10)


if __name__ == "__main__":
    os.chdir(benchlib.REPO_ROOT)
    main()
