"""Platform overhead of one send with the offline `scripted` model.

    .venv/bin/python bench/send_overhead.py [--db sqlite|postgres|both] [--sends N]

For each database a fresh child process (this file with `--child`) sets
Django up on a new, empty database, migrates it, and builds one agent per
history size (0, 50, 200 blocks), each with 20 memories (2 of them open).
It then times `agents.engine.turn_send` on each agent, for a plain message
and for a message whose script makes one memory tool call, the six rows
interleaved send by send. After every send the block it added is taken off
again (untimed), so every timed send sees exactly the history size it is
reported under. The parent prints a markdown table and writes
bench/results-send-overhead.json (`--show-queries` also prints the SQL of
one send of each kind).

See bench/README.md for what is measured and what is left out.
"""

import argparse
import gc
import json
import os
import random
import re
import statistics
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import benchlib  # noqa: E402
from benchlib import script  # noqa: E402 — send_folded.py imports it from here too

RESULTS_PATH = BENCH_DIR / "results-send-overhead.json"

SQLITE_PATH = Path("/tmp/studio-bench.sqlite3")
POSTGRES_DB = "studio_bench"

HISTORY_SIZES = (0, 50, 200)
MEMORY_COUNT = 20
OPEN_MEMORY_COUNT = 2
MEMORY_CONTENT_CHARS = 300
MESSAGE_CHARS = 200
SCRIPTED_BLOCK_EVERY = 5  # every 5th history block plays open_memory + close_memory
CAPTURED_SENDS = 5  # extra sends per series run under CaptureQueriesContext
VARIANTS = ("plain", "1 tool call")

WORDS = (
    "the lantern ash mere chapel door north road old miller river ford tower "
    "bell raven blade oath captain guard market silver coin thief shadow wall "
    "gate ember keep moss stone herald king queen widow smith forge hammer "
    "harbour ship rope tide salt storm cellar wine barrel crypt bone candle "
    "wolf hunt forest path bridge troll toll map scroll ink monk abbey vow "
    "debt letter seal wax rumour tavern song fiddle dawn dusk frost"
).split()


# --- the parent: one child per database, then the table ---------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--sends", type=int, default=200, help="timed sends per row (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed sends per row first (default 20)")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH)
    parser.add_argument("--show-queries", action="store_true", help="print the SQL of one send of each kind")
    parser.add_argument("--child", choices=("sqlite", "postgres"), help=argparse.SUPPRESS)
    parser.add_argument("--child-output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sends < 2 or args.warmup < 0:
        parser.error("--sends must be at least 2 and --warmup at least 0")
    if args.child:
        return child_main(args)

    databases = ("sqlite", "postgres") if args.db == "both" else (args.db,)
    started = time.monotonic()
    runs, failed = benchlib.run_each(databases, lambda db: run_child(db, args))
    if not runs:
        print("no database could be measured", file=sys.stderr)
        return 1

    report = {
        "benchmark": "send_overhead",
        "machine": benchlib.machine_info_brief(),
        "settings": {
            "sends": args.sends,
            "warmup": args.warmup,
            "historySizes": list(HISTORY_SIZES),
            "memories": MEMORY_COUNT,
            "openMemories": OPEN_MEMORY_COUNT,
            "model": "scripted",
            "channelLayer": "InMemoryChannelLayer (REDIS_URL unset)",
            # Each timed send's block is deleted after it, untimed.
            "historyHeldConstant": True,
            "forcedCheckpointBlocks": 1_000_000,
        },
        "databases": {db: run["database"] for db, run in runs.items()},
        "results": [row for run in runs.values() for row in run["results"]],
        "elapsedSeconds": round(time.monotonic() - started, 1),
    }
    benchlib.write_json(args.output, report)

    print()
    print(markdown_table(report["results"]))
    print()
    print(machine_line(report))
    if args.show_queries:
        print(query_listing(report["results"]))
    print(f"wrote {benchlib.display_path(args.output)} in {report['elapsedSeconds']} s")
    if failed:
        print(f"FAILED: {', '.join(failed)} (see the output above)", file=sys.stderr)
        return 1
    return 0


def run_child(db: str, args) -> dict | None:
    print(f"== {db}: {args.sends} timed sends per row after {args.warmup} warm-up sends", flush=True)
    try:
        url = benchlib.db_recreate(db, postgres=POSTGRES_DB, sqlite=SQLITE_PATH)
    except Exception as error:  # noqa: BLE001 — report and go on with the other database
        print(f"{db}: cannot prepare the database: {error}", file=sys.stderr)
        return None
    # Events go to the in-process channel layer (no REDIS_URL): no Redis
    # round trip in a send. Compaction is not part of a send's overhead: a
    # forced checkpoint (every 200 blocks by default) would fold the history
    # being measured.
    env = benchlib.django_env(url, STUDIO_FORCED_CHECKPOINT_BLOCKS="1000000")
    return benchlib.run_child(
        __file__,
        ["--child", db, "--sends", str(args.sends), "--warmup", str(args.warmup)],
        env,
        output_option="--child-output",
        label=db,
        tmp_prefix="studio-bench-",
    )


def markdown_table(
    results: list[dict],
    *,
    blocks: dict[str, str] | None = None,
    queries: str = "Queries/send",
    db_time: str = "DB time ms/send",
) -> str:
    """One line per row; `blocks`: the history columns, heading → key of
    the row (send_folded.py's table has two)."""
    blocks = blocks or {"History blocks": "history"}
    lines = [
        f"| DB | {' | '.join(blocks)} | Send | p50 ms | p95 ms | mean ms | {queries} | {db_time} |",
        "|---|" + "---:|" * len(blocks) + "---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        history = " | ".join(str(r[key]) for key in blocks.values())
        lines.append(
            f"| {r['db']} | {history} | {r['variant']} | {r['p50Ms']:.2f} | {r['p95Ms']:.2f} "
            f"| {r['meanMs']:.2f} | {r['queriesPerSend']} | {r['dbMsPerSend']:.2f} |"
        )
    return "\n".join(lines)


def query_listing(results: list[dict]) -> str:
    """The statements of one send per (database, variant), at the smallest
    history size (the statements do not depend on it)."""
    smallest = min(r["history"] for r in results)
    out = []
    for r in results:
        if r["history"] != smallest:
            continue
        out.append(f"\n{r['db']}, {r['variant']}: {r['queriesPerSend']} statements")
        out.extend(f"  {n:>2}. {sql}" for n, sql in enumerate(r["queries"], 1))
    return "\n".join(out)


def machine_line(report: dict) -> str:
    versions = ", ".join(f"{db} {info['version']}" for db, info in report["databases"].items())
    return benchlib.machine_brief_line(report["machine"], versions)


# --- the child: one database, every row ---------------------------------------------


def child_main(args) -> int:
    benchlib.django_setup()
    from django.core.management import call_command
    from django.db import connection

    from studio.keys import game_create

    def log(text: str) -> None:
        benchlib.log(args.child, text)

    started = time.monotonic()
    call_command("migrate", verbosity=0)
    game, _ = game_create(slug=f"bench-{args.child}", credits=1_000_000)
    log(f"migrated in {time.monotonic() - started:.1f} s")

    agents = {history: build_agent(game, history, log) for history in HISTORY_SIZES}
    results = measure(agents, args, log, db=args.child)

    database = {
        "vendor": connection.vendor,
        "version": benchlib.django_db_version(connection),
        "url": os.environ["DATABASE_URL"],
        "rowsAtEnd": row_counts(),
        "elapsedSeconds": round(time.monotonic() - started, 1),
    }
    args.child_output.write_text(json.dumps({"database": database, "results": results}))
    log(f"done in {database['elapsedSeconds']} s")
    return 0


def row_counts(*, checkpoints: bool = False) -> dict:
    """Rows of the tables a send writes to (and, with `checkpoints`, of Checkpoint)."""
    from agents.models import Block, Checkpoint, Turn
    from billing.models import CostLine
    from memories.models import Memory, MemoryEvent

    models = (Turn, Block, *((Checkpoint,) if checkpoints else ()), CostLine, Memory, MemoryEvent)
    return {model.__name__: model.objects.count() for model in models}


# --- building an agent: memories through the tools, history through sends ------------
# (send_folded.py builds its agents with these too)


def texts(seed: int, count: int, chars: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars - 8:
            words.append(rng.choice(WORDS))
        sentence = " ".join(words)
        out.append(sentence[0].upper() + sentence[1:] + f". ({rng.randint(1, 99)})")
    return out


def memory_names() -> list[str]:
    return [f"note-{i:02d}" for i in range(MEMORY_COUNT)]


def build_agent(game, history: int, log):
    from agents.services import AgentDefinition, agent_define

    started = time.monotonic()
    agent, _ = agent_define(
        game=game,
        name=f"bench{history}",
        definition=AgentDefinition(memory_enabled=True, max_open_tokens=4000, max_tokens=400000),
    )
    memories_write(agent, seed=1000 + history)
    real_sends(agent, first=1, last=history)
    agent.refresh_from_db()
    if agent.last_block != history:
        raise RuntimeError(f"agent {agent.name} has {agent.last_block} blocks, not {history}")
    log(
        f"built {agent.name}: {history} blocks, {MEMORY_COUNT} memories in {time.monotonic() - started:.1f} s"
    )
    return agent


def memories_write(agent, *, seed: int) -> None:
    """MEMORY_COUNT memories written through the memory tools (`close_memory`
    with content), the first OPEN_MEMORY_COUNT of them then opened."""
    names = memory_names()
    contents = texts(seed=seed, count=MEMORY_COUNT, chars=MEMORY_CONTENT_CHARS)
    for index, (name, content) in enumerate(zip(names, contents, strict=True)):
        arguments = {
            "name": name,
            "description": f"What the party knows about thread {index}",
            "content": content,
        }
        memory_tool(agent, "close_memory", arguments)
    for name in names[:OPEN_MEMORY_COUNT]:
        memory_tool(agent, "open_memory", {"name": name})


def memory_tool(agent, name: str, arguments: dict) -> None:
    from django.db import transaction

    from memories.tools import tool_run

    with transaction.atomic():
        result = tool_run(agent=agent, name=name, arguments=arguments)
    if result.is_error:
        raise RuntimeError(f"memory tool failed while building: {result.text}")


def real_sends(agent, *, first: int, last: int) -> None:
    """Blocks first..last by real sends; every 5th opens and closes a memory."""
    from agents.engine import turn_send
    from agents.models import TurnStatus

    if last < first:
        return
    messages = texts(seed=2000 + last, count=last - first + 1, chars=MESSAGE_CHARS)
    closed = memory_names()[OPEN_MEMORY_COUNT:]
    for number in range(first, last + 1):
        text = messages[number - first]
        if number % SCRIPTED_BLOCK_EVERY == 0:
            name = closed[(number // SCRIPTED_BLOCK_EVERY) % len(closed)]
            text = script(
                {"call": "open_memory", "args": {"name": name}},
                {"call": "close_memory", "args": {"name": name}},
                {"say": text},
            )
        turn = turn_send(agent=agent, content=text)
        if turn.status != TurnStatus.COMPLETED:
            raise RuntimeError(f"history send {number} ended {turn.status}: {turn.error}")


# --- measuring ------------------------------------------------------------------------


class Series:
    """One row of the table: sends of one variant to one agent, each seeing
    exactly `history` blocks (the block a send adds is taken off again
    after it, untimed). send_folded.py's series are these too."""

    captured_sends = CAPTURED_SENDS  # extra sends run under CaptureQueriesContext
    same_queries = True  # they must run as many statements each
    check_tools_always = False  # check the tool calls of every send, not only of the first

    def __init__(self, agent, history: int, variant: str):
        self.agent, self.history, self.variant = agent, history, variant
        self.plain = texts(seed=3000 + history, count=64, chars=MESSAGE_CHARS)
        self.samples: list[float] = []

    def content(self, index: int) -> str:
        text = self.plain[index % len(self.plain)]
        if self.variant == "plain":
            return text
        # The first memory has been open since the build: the call changes nothing.
        return script({"call": "open_memory", "args": {"name": memory_names()[0]}}, {"say": text})

    def turn(self, index: int):
        """One send, neither timed nor checked; returns its turn."""
        from agents.engine import turn_send

        return turn_send(agent=self.agent, content=self.content(index))

    def send(self, index: int, *, timed: bool, check_tools: bool = False) -> None:
        began = time.perf_counter()
        turn = self.turn(index)
        elapsed = time.perf_counter() - began
        self.after_send(turn, check_tools=check_tools)
        if timed:
            self.samples.append(elapsed)

    def after_send(self, turn, *, check_tools: bool = False) -> None:
        from agents.models import TurnStatus
        from agents.selectors import turn_tool_calls

        if turn.status != TurnStatus.COMPLETED or turn.block_number != self.history + 1:
            raise RuntimeError(
                f"{self.variant} send to {self.agent.name} ended {turn.status} at block "
                f"{turn.block_number}: {turn.error}"
            )
        if check_tools or self.check_tools_always:
            calls = turn_tool_calls(turn)
            expected = 0 if self.variant == "plain" else 1
            if len(calls) != expected or any(c["isError"] for c in calls):
                raise RuntimeError(f"{self.variant} send made these tool calls: {calls}")
        history_rewind(self.agent, self.history)

    def capture(self) -> dict:
        """Queries and database time of a few more sends (untimed)."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        captures, db_seconds = [], []
        for index in range(self.captured_sends):
            with db_clock() as spent, CaptureQueriesContext(connection) as captured:
                turn = self.turn(index)
            self.after_send(turn)
            captures.append(captured.captured_queries)
            db_seconds.append(spent[0])
        self.raw_queries = [q["sql"] for q in captures[0]]
        queries = [normalize_sql(sql) for sql in self.raw_queries]
        if self.same_queries and any(len(c) != len(queries) for c in captures):
            raise RuntimeError(f"{self.variant} sends ran {sorted({len(c) for c in captures})} queries")
        return {
            "queriesPerSend": len(queries),
            "dbMsPerSend": round(statistics.median(db_seconds) * 1000, 3),
            "queries": queries,
            "repeatedQueries": [
                {"sql": sql, "times": n} for sql, n in Counter(queries).most_common() if n > 1
            ],
        }


def measure(agents: dict, args, log, *, db: str) -> list[dict]:
    """Time `turn_send` for every (history, variant), interleaved (see
    `interleave`)."""
    series = [Series(agent, history, variant) for history, agent in agents.items() for variant in VARIANTS]
    for history, agent in agents.items():
        history_check(agent, history)
    load_before, load_after = interleave(series, args)
    log(f"timed {args.sends} sends per row; load average {load_before:.2f} before, {load_after:.2f} after")

    rows = []
    for one in series:
        row = {
            "db": db,
            "history": one.history,
            "variant": one.variant,
            "sends": len(one.samples),
            **summarize(one.samples),
            **one.capture(),
            "loadAverage": [load_before, load_after],
        }
        rows.append(row)
        log(row_line(one, row, width=3))
    for history, agent in agents.items():
        history_check(agent, history)
    return rows


def interleave(series: list[Series], args) -> tuple[float, float]:
    """`args.warmup` untimed then `args.sends` timed sends of every series,
    interleaved send by send: drift (tables growing, a busy neighbour on the
    machine) falls on every row alike instead of on whichever ran last.
    Returns the load average before and after, rounded."""
    gc.collect()
    load_before = os.getloadavg()[0]
    for index in range(args.warmup + args.sends):
        for one in series:
            one.send(index, timed=index >= args.warmup, check_tools=index == 0)
    load_after = os.getloadavg()[0]
    return round(load_before, 2), round(load_after, 2)


def row_line(one: Series, row: dict, *, width: int) -> str:
    return (
        f"{one.history:>{width}} blocks, {one.variant:<11}: p50 {row['p50Ms']:.2f} ms, p95 {row['p95Ms']:.2f} ms, "
        f"{row['queriesPerSend']} queries, {row['dbMsPerSend']:.2f} ms in the database"
    )


@contextmanager
def db_clock():
    """Seconds spent in the database: every statement (BEGIN included) and
    every COMMIT, as the client waits for them. Adds them up in `spent[0]`."""
    from django.db import connections

    connection = connections["default"]
    spent = [0.0]

    def timed(call, *args):
        began = time.perf_counter()
        try:
            return call(*args)
        finally:
            spent[0] += time.perf_counter() - began

    commit = connection._commit
    connection._commit = lambda: timed(commit)
    try:
        with connection.execute_wrapper(lambda execute, *args: timed(execute, *args)):
            yield spent
    finally:
        del connection._commit


def history_rewind(agent, history: int) -> None:
    """Take off the block a timed send added, so the next send sees the same
    history. Its turn and cost lines stay, as they would in production."""
    from agents.models import Agent, Block

    Block.objects.filter(agent_id=agent.pk, number__gt=history).delete()
    Agent.objects.filter(pk=agent.pk).update(last_block=history)


def history_check(agent, history: int) -> None:
    from agents.models import Block, Checkpoint

    blocks = Block.objects.filter(agent_id=agent.pk, folded=False).count()
    checkpoints = Checkpoint.objects.filter(agent_id=agent.pk).count()
    if blocks != history or checkpoints:
        raise RuntimeError(
            f"{agent.name} should have {history} verbatim blocks and no checkpoint; it has "
            f"{blocks} blocks and {checkpoints} checkpoints"
        )


def summarize(samples: list[float]) -> dict:
    """benchlib.percentiles without n and p99 (the keys of this file's rows)."""
    stats = benchlib.percentiles(samples)
    return {key: stats[key] for key in ("p50Ms", "p95Ms", "meanMs", "minMs", "maxMs")}


_STRING = re.compile(r"'(?:[^']|'')*'")
_NUMBER = re.compile(r"(?<![\w\"])-?\d+(?:\.\d+)?(?![\w\"])")
_SELECT_COLUMNS = re.compile(r"^SELECT .+? FROM ", re.S)
_INSERT_VALUES = re.compile(r"^(INSERT INTO \S+) \(.*?\) VALUES .*?(RETURNING .*)?$", re.S)
_SPACES = re.compile(r"\s+")


def normalize_sql(sql: str) -> str:
    """The statement with its values taken out and its column lists
    shortened, so repeats of one query read as one line."""
    text = _SPACES.sub(" ", sql).strip()
    text = _STRING.sub("?", text)
    text = _NUMBER.sub("?", text)
    text = _SELECT_COLUMNS.sub(lambda m: "SELECT … FROM " if m.group(0).count(",") > 1 else m.group(0), text)
    text = _INSERT_VALUES.sub(
        lambda m: f"{m.group(1)} (…) VALUES (…)" + (f" {m.group(2)}" if m.group(2) else ""), text
    )
    return text


if __name__ == "__main__":
    sys.exit(main())
