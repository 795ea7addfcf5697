"""(c) Event latency: from a turn's commit to a WebSocket client's receipt
of its `turn.finished`.

    .venv/bin/python bench/events.py [--sends 200] [--loaded-sends 100] [--db-pool] [--json-out PATH]

The commit is seen from PostgreSQL: a trigger added to this benchmark's
database NOTIFYs when a turn ends, delivered to a LISTENing connection
here when that transaction commits. Idle, then with 4 other agents kept
busy by a second process (this file, --load). See bench/README.md.
"""

import argparse
import itertools
import json
import subprocess
import sys
import threading
import time
from datetime import datetime

import benchlib

LOAD_AGENTS = 4
TRIGGER = """
CREATE FUNCTION bench_turn_ended() RETURNS trigger AS $$
BEGIN PERFORM pg_notify('bench_turn_ended', NEW.uuid::text); RETURN NEW; END $$ LANGUAGE plpgsql;
CREATE TRIGGER bench_turn_ended AFTER UPDATE OF status ON agents_turn
  FOR EACH ROW WHEN (NEW.status IN ('completed', 'cancelled', 'failed') AND OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION bench_turn_ended();
"""


class Stamps:
    """Receive times by turn id, filled by a thread of their own."""

    def __init__(self, source):
        self.seen, self.cond = {}, threading.Condition()
        threading.Thread(target=self._run, args=(source,), daemon=True).start()

    def _run(self, source) -> None:
        try:
            for turn_id in source:
                at = time.time()
                with self.cond:
                    self.seen[turn_id] = at
                    self.cond.notify_all()
        except Exception:  # noqa: BLE001 — closed at the end
            return

    def pop(self, turn_id: str, timeout: float = 10) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: turn_id in self.seen, timeout):
                raise TimeoutError(f"nothing for turn {turn_id} within {timeout} s")
            return self.seen.pop(turn_id)


def finished_events(ws, counts: dict):
    """The turn ids of the `turn.finished` events on `ws`, counting every type."""
    for raw in ws:
        event = json.loads(raw)
        counts[event["type"]] = counts.get(event["type"], 0) + 1
        if event["type"] == "turn.finished":
            yield event["turnId"]


def measure(api, received: Stamps, committed: Stamps, sends: int, offset: int) -> dict:
    latencies, from_ended, after_response = [], [], []
    for index in range(sends):
        turn = api.send("ev", benchlib.player_message(offset + index))
        responded = time.time()
        at = received.pop(turn["id"])
        latencies.append(at - committed.pop(turn["id"]))
        from_ended.append(at - datetime.fromisoformat(turn["endedAt"]).timestamp())
        after_response.append(at - responded)
    out = benchlib.percentiles(latencies)
    out["fromEndedAt"] = benchlib.percentiles(from_ended)
    out["eventAfterHttpResponse"] = benchlib.percentiles(after_response)
    out["eventBeforeHttpResponseShare"] = round(sum(x < 0 for x in after_response) / len(after_response), 3)
    return out


def load_child(port: int, key: str) -> int:
    """Keep LOAD_AGENTS agents busy until stdin closes (a process of its
    own, so its threads do not share the listener's GIL)."""

    def run(agent: str) -> None:
        api = benchlib.Api(port, key)
        for index in itertools.count():
            api.send(agent, benchlib.player_message(index))

    for i in range(LOAD_AGENTS):
        threading.Thread(target=run, args=(f"load{i}",), daemon=True).start()
    print("LOADING", flush=True)
    sys.stdin.read()
    return 0


def run(args, log) -> dict:
    import psycopg
    from websockets.sync.client import connect

    report = {}
    with benchlib.StudioServer("events", env={"STUDIO_DB_POOL": "1"} if args.db_pool else {}) as server:
        log(f"server up on :{server.port} in {server.setup_seconds} s")
        api = server.api()
        for name in ["ev", *(f"load{i}" for i in range(LOAD_AGENTS))]:
            api.define(name, "You are the keeper of the Ashmere campaign.")
        listen = psycopg.connect(server.database_url, autocommit=True)
        listen.execute(TRIGGER)
        listen.execute("LISTEN bench_turn_ended")
        committed = Stamps(note.payload for note in listen.notifies())
        ws = connect(
            f"ws://127.0.0.1:{server.port}/ws/v1/agents/ev/events",
            subprotocols=["studio.v1", f"bearer.{server.key}"],
            open_timeout=10,
        )
        if json.loads(ws.recv(timeout=10))["type"] != "hello":
            raise RuntimeError("the event stream did not start with hello")
        counts: dict = {}
        received = Stamps(finished_events(ws, counts))
        measure(api, received, committed, 10, offset=0)  # warm-up
        idle = report["idle"] = measure(api, received, committed, args.sends, offset=100)
        log(f"idle: p50 {idle['p50Ms']:.2f} ms, p99 {idle['p99Ms']:.2f} ms")
        if args.loaded_sends:
            command = [sys.executable, __file__, "--load", str(server.port), server.key]
            loader = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                if loader.stdout.readline().strip() != "LOADING":
                    raise RuntimeError("the load process did not start")
                time.sleep(1)
                loaded = report["loaded"] = measure(api, received, committed, args.loaded_sends, offset=1000)
                loaded["loadAgents"] = LOAD_AGENTS
            finally:
                loader.stdin.close()
                loader.wait(15)
            log(f"loaded: p50 {loaded['p50Ms']:.2f} ms, p99 {loaded['p99Ms']:.2f} ms")
        ws.close()
        listen.close()
        report.update(eventsHeard=counts, rssEndMb=server.rss())
    report["summary"] = [
        f"events: commit → WebSocket receipt p50 {run['p50Ms']:.2f} ms, p99 {run['p99Ms']:.2f} ms ({name})"
        for name, run in report.items()
        if name in ("idle", "loaded")
    ]
    return report


def main() -> int:
    if sys.argv[1:2] == ["--load"]:
        return load_child(int(sys.argv[2]), sys.argv[3])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=200, help="timed sends, idle (default 200)")
    parser.add_argument("--loaded-sends", type=int, default=100, help="timed sends under load (0: none)")
    parser.add_argument("--db-pool", action="store_true", help="serve with STUDIO_DB_POOL=1")
    return benchlib.main("events", parser, run)


if __name__ == "__main__":
    sys.exit(main())
