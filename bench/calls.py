"""Function calls per (b) message, and where they run: a count, not a clock.

    .venv/bin/python bench/calls.py [--messages 40] [--top 20] [--stream] [--json-out PATH]
    .venv/bin/python bench/calls.py --first-sends 50 [--top 20]

Serves the studio as (b) does, with a profile hook in the server process
(`sys.setprofile` on every thread, installed by a `sitecustomize` put on
its PYTHONPATH) that counts each function call, Python's and built-in:
under the package of the function called, and under the nearest function
of the studio's own on the stack (its caller's, when that one is the
studio's too). The (b) agent is set up and warmed, then `--messages`
messages are sent between two snapshots of the counts (SIGUSR2 makes the
server write them). Prints calls per message in all, by package, and by
the studio's function.

The hook makes the server many times slower, so no time is reported. The
count barely moves with the machine's speed (two runs of one checkout
agree within ~1%), which makes it the figure to look at first on these
noisy VMs: a layer that makes thousands of calls a message is where CPU
goes. Whether a change pays is still measured by the clock (`paired.py`).

`--first-sends N` counts `players.py`'s sends instead (one model call each,
the model answering after 0.3 s): N agents' first sends at once, then the
same N agents' second sends at once, after a round on N other agents has
grown the process's threads and pool. Prints calls per first and per warm
send, and where a first send makes more.
"""

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import benchlib
import players
from agent_server import setup_agent, timed_send

HOOK = """
import os
if os.environ.get("STUDIO_CALLS_OUT"):
    import collections, json, signal, sys, threading
    _counts = collections.Counter()
    _root = os.environ["STUDIO_CALLS_ROOT"]
    _skip = os.path.join(_root, ".venv")

    def _ours(name):
        return name.startswith(_root) and not name.startswith(_skip)

    def _package(name):
        if not name.startswith("/"):
            return name
        if _ours(name):
            return os.path.relpath(name, _root).split(os.sep)[0] + "/ (the studio)"
        if "site-packages" in name:
            return name.split("site-packages" + os.sep, 1)[1].split(os.sep)[0].removesuffix(".py")
        return "python: " + os.path.basename(os.path.dirname(name) or name)

    def _owner(frame):
        found = []
        while frame is not None and len(found) < 2:
            name = frame.f_code.co_filename
            if _ours(name):
                found.append(os.path.relpath(name, _root) + ":" + frame.f_code.co_name)
            frame = frame.f_back
        return " < ".join(found) or "(no studio function)"

    def _hook(frame, event, arg):
        if event == "call":
            _counts[(_package(frame.f_code.co_filename), _owner(frame.f_back))] += 1
        elif event == "c_call":
            _counts[("built-in", _owner(frame))] += 1

    def _write(*_):
        sys.setprofile(None)
        with open(os.environ["STUDIO_CALLS_OUT"], "w") as out:
            json.dump([[package, owner, n] for (package, owner), n in _counts.items()], out)
        sys.setprofile(_hook)

    signal.signal(signal.SIGUSR2, _write)
    sys.setprofile(_hook)
    threading.setprofile(_hook)
"""


def snapshot(pid: int, path: Path) -> Counter:
    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    for _ in range(600):  # written by the server's main thread, between two of its loop's turns
        if path.exists():
            try:
                return Counter({(package, owner): n for package, owner, n in json.loads(path.read_text())})
            except ValueError:
                pass  # still being written
        time.sleep(0.05)
    raise RuntimeError("the server did not write its counts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=40, help="messages counted (default 40)")
    parser.add_argument("--top", type=int, default=20, help="rows of each list (default 20)")
    parser.add_argument("--stream", action="store_true", help='messages sent with "stream": true')
    parser.add_argument("--json-out", type=Path, default=benchlib.BENCH_DIR / "results-calls.json")
    parser.add_argument("--first-sends", type=int, default=0, help="count N first sends against N warm ones")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="studio-calls-"))
    (folder / "sitecustomize.py").write_text(HOOK)
    out = folder / "counts.json"
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    latency = 300 if args.first_sends else 0
    with benchlib.FakeOpenAI(latency_ms=latency) as fake:
        env = {
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_API_KEY": "bench",
            "STUDIO_ALLOW_UNPRICED_MODELS": "1",
        }
        env |= {"STUDIO_DB_POOL": "1", "PYTHONPATH": path, "STUDIO_CALLS_OUT": str(out)}
        env |= {"STUDIO_CALLS_ROOT": str(benchlib.REPO_ROOT) + os.sep}
        if args.first_sends:
            first_sends(args, env, out)
            return
        with benchlib.StudioServer("calls", env=env) as server:
            api = server.api()
            setup_agent(api, "seq")
            for index in range(10):
                timed_send(api, "seq", index, args.stream)
            before = snapshot(server.pids[0], out)
            for index in range(args.messages):
                timed_send(api, "seq", 100 + index, args.stream)
            after = snapshot(server.pids[0], out)
    counts = {key: (after[key] - before[key]) / args.messages for key in after if after[key] > before[key]}
    by_package, by_owner = Counter(), Counter()
    for (package, owner), n in counts.items():
        by_package[package] += n
        by_owner[owner] += n
    total = sum(counts.values())
    print(f"function calls per message: {total:,.0f} ({args.messages} messages)")
    for title, counter in (("by the package called", by_package), ("by the studio's function", by_owner)):
        print(f"\n{title}:")
        for name, n in counter.most_common(args.top):
            print(f"  {n:8,.0f}  {100 * n / total:4.1f}%  {name}")
    report = {"messages": args.messages, "callsPerMessage": round(total, 1)}
    report |= {"byPackage": dict(by_package.most_common()), "byStudioFunction": dict(by_owner.most_common())}
    args.json_out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwritten to {args.json_out}", file=sys.stderr)


def first_sends(args, env: dict, out: Path) -> None:
    n = args.first_sends
    env |= {"STUDIO_MAX_LIVE_TURNS_PER_GAME": str(n + 10), "STUDIO_DEFINITION_RATE": "100000/min"}
    with benchlib.StudioServer("calls", env=env) as server:
        names = players.define(server, 2 * n, lambda text: benchlib.log("calls", text))
        counts = []
        # Threads, pool and connections grown on other agents; then first sends; then warm ones.
        for round_names in (names[n:], names[:n], names[:n]):
            players.round_of(server, round_names, 0.3, lambda text: benchlib.log("calls", text))
            counts.append(snapshot(server.pids[0], out))
    first, warm = (
        Counter({key: (after[key] - before[key]) / n for key in after if after[key] > before[key]})
        for before, after in ((counts[0], counts[1]), (counts[1], counts[2]))
    )
    more = Counter()
    for (_, owner), calls in first.items():
        more[owner] += calls
    for (_, owner), calls in warm.items():
        more[owner] -= calls
    print(
        f"function calls per first send: {sum(first.values()):,.0f}; per warm send: {sum(warm.values()):,.0f} ({n} each)"
    )
    print("\nwhere a first send makes more (calls per send, by the studio's function):")
    for owner, calls in more.most_common(args.top):
        if calls > 0:
            print(f"  {calls:8,.1f}  {owner}")


if __name__ == "__main__":
    main()
