"""Event latency: from a turn's commit to a WebSocket client's receipt of
its `turn.finished`.

    .venv/bin/python bench/events.py [--sends 200] [--loaded-sends 100] [--json-out PATH]

A studio server (Daphne, PostgreSQL `studio_bench_events`, Redis as the
channel layer) and the `scripted` model. A listener (websockets' sync
client, in a thread of this process) is connected to
`/ws/v1/agents/ev/events?key=…`; the main thread sends plain messages to
`ev` through the API, one at a time, and waits for each one's
`turn.finished` before the next.

Events carry no timestamp, and the app is not changed to add one. The
commit is seen from PostgreSQL instead: this benchmark adds to its own
database a trigger on the turn table that NOTIFYs when a turn's status
becomes ended; PostgreSQL delivers a notification when (and only when) the
transaction commits, to a LISTENing connection of this process. The
latency is (the listener's receive time of `turn.finished`) − (the receive
time of that turn's notification), both `time.time()` in this process. The
notification itself takes a fraction of a millisecond to arrive, so this
slightly under-states commit → receipt; the trigger adds one pg_notify to
the transaction that ends a turn.

Also reported: receipt − the turn's `endedAt` (from the API response; it is
taken at the start of the transaction that ends the turn, so it adds that
transaction's statements and its COMMIT), and how much later (or earlier)
the event arrived than the HTTP response.

Two phases: idle (nothing else running in the studio) and loaded (a
separate process keeps 4 other agents busy with back-to-back sends).
"""

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import benchlib  # noqa: E402

RESULTS_PATH = BENCH_DIR / "results-events.json"
AGENT = "ev"
LOAD_AGENTS = 4


def definition() -> dict:
    return benchlib.agent_definition("You are the keeper of the Ashmere campaign.")


class Listener:
    """A WebSocket client in a thread: every message with its receive time."""

    def __init__(self, port: int, key: str, agent: str):
        from websockets.sync.client import connect

        self._connect = connect(
            f"ws://127.0.0.1:{port}/ws/v1/agents/{agent}/events?key={key}", open_timeout=10
        )
        self.ws = self._connect.__enter__()
        hello = json.loads(self.ws.recv(timeout=10))
        if hello.get("type") != "hello":
            raise RuntimeError(f"the event stream did not start with hello: {hello}")
        self.finished: queue.Queue = queue.Queue()
        self.counts: dict = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from websockets.exceptions import ConnectionClosed

        while True:
            try:
                raw = self.ws.recv()
            except ConnectionClosed:
                return
            at = time.time()
            event = json.loads(raw)
            kind = event.get("type")
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if kind == "turn.finished":
                self.finished.put((at, event))

    def wait_finished(self, turn_id: str, timeout: float = 10) -> float:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no turn.finished for {turn_id} within {timeout} s")
            at, event = self.finished.get(timeout=left)
            if event.get("turnId") == turn_id:
                return at

    def close(self) -> None:
        self._connect.__exit__(None, None, None)


class CommitWatch:
    """The commit of each turn's end, seen from PostgreSQL: a trigger on
    the turn table (added to this benchmark's database only) NOTIFYs when a
    turn's status becomes ended, and PostgreSQL delivers a notification
    only when its transaction commits. A thread LISTENs and keeps each
    turn's receive time."""

    CHANNEL = "bench_turn_ended"

    def __init__(self, database_url: str):
        import psycopg

        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                f"""
                CREATE OR REPLACE FUNCTION bench_turn_ended() RETURNS trigger AS $$
                BEGIN
                  PERFORM pg_notify('{self.CHANNEL}', NEW.uuid::text);
                  RETURN NEW;
                END $$ LANGUAGE plpgsql;
                DROP TRIGGER IF EXISTS bench_turn_ended ON agents_turn;
                CREATE TRIGGER bench_turn_ended AFTER UPDATE OF status ON agents_turn
                  FOR EACH ROW WHEN (NEW.status IN ('completed', 'cancelled', 'failed')
                                     AND OLD.status IS DISTINCT FROM NEW.status)
                  EXECUTE FUNCTION bench_turn_ended();
                """
            )
        self.conn = psycopg.connect(database_url, autocommit=True)
        self.conn.execute(f"LISTEN {self.CHANNEL}")
        self.seen: dict = {}
        self.cond = threading.Condition()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            for note in self.conn.notifies():
                at = time.time()
                with self.cond:
                    self.seen[note.payload] = at
                    self.cond.notify_all()
        except Exception:  # noqa: BLE001 — closed at the end
            return

    def committed_at(self, turn_id: str, timeout: float = 10) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: turn_id in self.seen, timeout):
                raise TimeoutError(f"no commit seen for turn {turn_id}")
            return self.seen.pop(turn_id)

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass


def measure(api: benchlib.Api, listener: Listener, watch: CommitWatch, sends: int, offset: int) -> dict:
    latencies, from_ended, after_response = [], [], []
    for index in range(sends):
        turn = api.send(AGENT, benchlib.player_message(offset + index))
        responded = time.time()
        received = listener.wait_finished(turn["id"])
        committed = watch.committed_at(turn["id"])
        ended = datetime.fromisoformat(turn["endedAt"]).timestamp()
        latencies.append(received - committed)
        from_ended.append(received - ended)
        after_response.append(received - responded)
    out = benchlib.percentiles(latencies)
    out["fromEndedAt"] = benchlib.percentiles(from_ended)
    out["eventAfterHttpResponse"] = benchlib.percentiles(after_response)
    out["eventBeforeHttpResponseShare"] = round(
        sum(1 for x in after_response if x < 0) / len(after_response), 3
    )
    return out


def load_child(port: int, key: str) -> int:
    """Keep LOAD_AGENTS agents busy until killed (a process of its own, so
    its threads do not share the listener's GIL)."""
    stop = threading.Event()

    def run(agent: str) -> None:
        api = benchlib.Api(port, key)
        index = 0
        while not stop.is_set():
            api.send(agent, benchlib.player_message(index))
            index += 1

    for i in range(LOAD_AGENTS):
        threading.Thread(target=run, args=(f"load{i}",), daemon=True).start()
    print("LOADING", flush=True)
    try:
        sys.stdin.read()  # until the parent closes our stdin
    finally:
        stop.set()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=200, help="timed sends, idle (default 200)")
    parser.add_argument(
        "--loaded-sends", type=int, default=100, help="timed sends under load (default 100; 0: skip)"
    )
    benchlib.add_db_pool_option(parser)
    parser.add_argument("--json-out", type=Path, default=RESULTS_PATH)
    parser.add_argument("--load", nargs=2, metavar=("PORT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        return load_child(int(args.load[0]), args.load[1])

    def log(text: str) -> None:
        benchlib.log("events", text)

    started = time.monotonic()
    report = {"benchmark": "events", "machine": benchlib.machine_info()}
    env = {"STUDIO_DB_POOL": "1"} if args.db_pool else {}
    with benchlib.StudioServer("events", env=env) as server:
        log(f"server up on :{server.port} in {server.setup_seconds} s")
        api = server.api()
        for name in [AGENT, *(f"load{i}" for i in range(LOAD_AGENTS))]:
            api.define(name, definition())
        watch = CommitWatch(server.database_url)
        listener = Listener(server.port, server.key, AGENT)
        measure(api, listener, watch, 10, offset=0)  # warm-up
        report["idle"] = measure(api, listener, watch, args.sends, offset=100)
        log(f"idle: p50 {report['idle']['p50Ms']:.2f} ms, p99 {report['idle']['p99Ms']:.2f} ms")
        if args.loaded_sends:
            loader = subprocess.Popen(
                [sys.executable, __file__, "--load", str(server.port), server.key],
                cwd=REPO_ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                if loader.stdout.readline().strip() != "LOADING":
                    raise RuntimeError("the load process did not start")
                time.sleep(1)
                report["loaded"] = measure(api, listener, watch, args.loaded_sends, offset=1000)
                report["loaded"]["loadAgents"] = LOAD_AGENTS
            finally:
                loader.stdin.close()
                try:
                    loader.wait(15)
                except subprocess.TimeoutExpired:
                    loader.kill()
            log(f"loaded: p50 {report['loaded']['p50Ms']:.2f} ms, p99 {report['loaded']['p99Ms']:.2f} ms")
        report["eventsHeard"] = dict(listener.counts)
        listener.close()
        watch.close()
        api.close()
        report["rssEndMb"] = server.status()
    report["settings"] = {
        "sends": args.sends,
        "loadedSends": args.loaded_sends,
        "model": "scripted",
        "dbPool": args.db_pool,
    }
    report["elapsedSeconds"] = round(time.monotonic() - started, 1)
    benchlib.write_json(args.json_out, report)
    idle = report["idle"]
    print(f"events: commit → WebSocket receipt p50 {idle['p50Ms']:.2f} ms, p99 {idle['p99Ms']:.2f} ms (idle)")
    if "loaded" in report:
        print(
            f"        under load p50 {report['loaded']['p50Ms']:.2f} ms, p99 {report['loaded']['p99Ms']:.2f} ms"
        )
    print(f"wrote {args.json_out} in {report['elapsedSeconds']} s")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
