"""What a web process spends on turns another web process serves.

    .venv/bin/python bench/heard.py [--messages 300] [--json-out PATH]

Two web processes on one database and one Redis, as the Procfile runs
them. Each serves a few sends first (so each listens for wake-ups, as a
process in service does); then `--messages` sends go to the first
process only, one after another, while the second serves nothing. Reports
the second's CPU per message: what every other web process of a
deployment pays for each turn, whoever serves it. At P web processes,
each turn costs the P - 1 others this much between them.
"""

import argparse
import sys

import benchlib

WARMUP = 10


def run(args, log) -> dict:
    with benchlib.StudioServer("heard") as server:
        server.add_web_process()
        serving, idle = server.api(0), server.api(1)
        serving.define("served", "You are a character served by the first web process.")
        serving.define("other", "You are a character served by the second web process.")
        for index in range(WARMUP):
            idle.send("other", benchlib.player_message(index))
            serving.send("served", benchlib.player_message(index))
        idle.close()
        meters = [benchlib.CpuMeter([pid]).start() for pid in server.pids]
        for index in range(args.messages):
            serving.send("served", benchlib.player_message(WARMUP + index))
        served, heard = (meter.stop(args.messages) for meter in meters)
        serving.close()
    log(f"serving process {served['serverCpuMsPerUnit']} ms, idle process {heard['serverCpuMsPerUnit']} ms")
    share = heard["serverCpuSeconds"] / max(served["serverCpuSeconds"], 1e-9)
    return {
        "messages": args.messages,
        "servingProcess": served,
        "idleProcess": heard,
        "idleOverServing": round(share, 4),
        "summary": [
            f"heard: the idle web process {heard['serverCpuMsPerUnit']:.3f} ms of CPU per message the other served "
            f"({served['serverCpuMsPerUnit']:.2f} ms; {share:.1%} of it)"
        ],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    sys.exit(benchlib.main("heard", parser, run))
