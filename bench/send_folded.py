"""Platform overhead of one send against TOTAL history: 0, 200 and 10,000
blocks, all but the newest ≤200 folded under a checkpoint.

    .venv/bin/python bench/send_folded.py [--sends N] [--warmup N] [--db postgres|sqlite]
                                          [--profile DIR] [--json-out PATH]

A child process (this file with `--child`) sets Django up on a fresh
database (PostgreSQL `studio_bench_folded` with Redis as the channel layer,
as in production; or SQLite without Redis) and builds three agents, each
with 20 memories (2 open) written through the memory tools:

- `hist0`: no history;
- `hist200`: 200 blocks made by real sends, none folded, no checkpoint;
- `hist10000`: 9,800 blocks inserted in bulk (each with its completed turn
  and its cost lines, as real play leaves them), folded under a
  `compaction` checkpoint whose context block is rendered by
  `agents.context.render_context_block`, then 200 real sends on top: 200
  verbatim blocks after the checkpoint, 10,000 in all.

It then times `agents.engine.turn_send` on each, a plain message and a
message whose script makes one memory tool call (`open_memory` of an open
memory), the six series interleaved send by send. After each send its block
is taken off again (untimed), so every timed send sees exactly the history
it is reported under. `STUDIO_FORCED_CHECKPOINT_BLOCKS` is raised so no
compaction is queued (compaction is not part of a send's overhead).

It also captures the SQL of one send per series and asks PostgreSQL to
EXPLAIN each statement of the 10,000-block agent's send: a sequential scan
of a table that grows with history is reported. With `--profile DIR`, 300
more sends to `hist10000` (200 plain, 100 with a tool call) run under
pyinstrument and the report goes to DIR/send_folded.txt.

See bench/README.md.
"""

import argparse
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import benchlib  # noqa: E402
import profile_report  # noqa: E402
from send_overhead import (  # noqa: E402 — the memory and message builders of send_overhead.py
    MEMORY_CONTENT_CHARS,
    MEMORY_COUNT,
    MESSAGE_CHARS,
    OPEN_MEMORY_COUNT,
    SCRIPTED_BLOCK_EVERY,
    db_clock,
    memory_names,
    normalize_sql,
    script,
    texts,
    tool_check,
    tool_run_atomic,
)

RESULTS_PATH = BENCH_DIR / "results-send-folded.json"
POSTGRES_DB = "studio_bench_folded"
SQLITE_PATH = Path("/tmp/studio-bench-folded.sqlite3")
TOTALS = (0, 200, 10_000)
VERBATIM_MAX = 200
VARIANTS = ("plain", "1 tool call")
PROFILE_SENDS = {"plain": 200, "1 tool call": 100}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=200, help="timed sends per series (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed sends per series first (default 20)")
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--profile", type=Path, help="also profile sends to hist10000; reports go here")
    parser.add_argument("--json-out", type=Path, default=RESULTS_PATH)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args)

    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STUDIO_", "DJANGO_"))}
    if args.db == "postgres":
        url = benchlib.pg_recreate(POSTGRES_DB)
        env.update(
            REDIS_URL=benchlib.REDIS_URL,
            STUDIO_CHANNEL_PREFIX=f"{POSTGRES_DB}.{os.getpid()}",
            STUDIO_CELERY_QUEUE=f"{POSTGRES_DB}.{os.getpid()}",
        )
    else:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{SQLITE_PATH}{suffix}").unlink(missing_ok=True)
        url = f"sqlite:///{SQLITE_PATH}"
        env.pop("REDIS_URL", None)
    env.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="studio.settings",
        DJANGO_DEBUG="false",
        STUDIO_FORCED_CHECKPOINT_BLOCKS="1000000",
        STUDIO_COMPACTION_RUNNER="none",
        PYTHONHASHSEED="0",
    )
    with tempfile.TemporaryDirectory(prefix="studio-bench-folded-") as tmp:
        out = Path(tmp) / "child.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--child", "--json-out", str(out)]
        command += ["--sends", str(args.sends), "--warmup", str(args.warmup), "--db", args.db]
        if args.profile:
            command += ["--profile", str(args.profile.resolve())]
        completed = subprocess.run(command, cwd=REPO_ROOT, env=env)
        if completed.returncode != 0 or not out.exists():
            print(f"send_folded: the benchmark process failed (exit {completed.returncode})", file=sys.stderr)
            return 1
        child = json.loads(out.read_text())
    report = {
        "benchmark": "send_folded",
        "machine": benchlib.machine_info(),
        "settings": {
            "db": args.db,
            "channelLayer": "Redis" if args.db == "postgres" else "in-process (no listener)",
            "sends": args.sends,
            "warmup": args.warmup,
            "totals": list(TOTALS),
            "verbatimMax": VERBATIM_MAX,
            "memories": MEMORY_COUNT,
            "openMemories": OPEN_MEMORY_COUNT,
            "model": "scripted",
            "forcedCheckpointBlocks": 1_000_000,
        },
        **child,
        "elapsedSeconds": round(time.monotonic() - started, 1),
    }
    benchlib.write_json(args.json_out, report)
    print(markdown_table(report["results"]))
    if report.get("seqScans"):
        print("\nsequential scans in a 10,000-block send:")
        for scan in report["seqScans"]:
            print(f"  {scan['table']} ({scan['rows']} rows): {scan['sql'][:160]}")
    print(f"\nwrote {args.json_out} in {report['elapsedSeconds']} s")
    return 0


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "| DB | Total blocks | Verbatim | Send | p50 ms | p95 ms | mean ms | Queries | DB ms/send |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['db']} | {r['total']} | {r['verbatim']} | {r['variant']} | {r['p50Ms']:.2f} | {r['p95Ms']:.2f} "
            f"| {r['meanMs']:.2f} | {r['queriesPerSend']} | {r['dbMsPerSend']:.2f} |"
        )
    return "\n".join(lines)


# --- the child ---------------------------------------------------------------------------


def child_main(args) -> int:
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from studio.keys import game_create

    def log(text: str) -> None:
        benchlib.log("send_folded", text)

    started = time.monotonic()
    call_command("migrate", verbosity=0)
    agents = {}
    for total in TOTALS:
        # A game per agent: its account row is its own, as separate games' are.
        game, _ = game_create(slug=f"bench-folded-{total}", credits=10**9)
        agents[total] = build_agent(game, total, log)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")  # as autovacuum would have by now
    rows, series = measure(agents, args, log, db=connection.vendor)
    seq_scans = explain_send(series, log) if connection.vendor == "postgresql" else []
    result = {
        "results": rows,
        "seqScans": seq_scans,
        "database": {"vendor": connection.vendor, "version": database_version(connection)},
        "rowsAtEnd": row_counts(),
    }
    if args.profile:
        result["profile"] = profile_sends(agents[TOTALS[-1]], TOTALS[-1], args.profile, log)
    args.json_out.write_text(json.dumps(result))
    log(f"done in {time.monotonic() - started:.1f} s")
    return 0


def database_version(connection) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SHOW server_version" if connection.vendor == "postgresql" else "SELECT sqlite_version()"
        )
        return cursor.fetchone()[0].split()[0]


def row_counts() -> dict:
    from agents.models import Block, Checkpoint, Turn
    from billing.models import CostLine
    from memories.models import Memory, MemoryEvent

    return {m.__name__: m.objects.count() for m in (Turn, Block, Checkpoint, CostLine, Memory, MemoryEvent)}


# --- building the agents -----------------------------------------------------------------


def build_agent(game, total: int, log):
    from django.db import transaction

    from agents.services import AgentDefinition, agent_define
    from memories.tools import tool_run

    began = time.monotonic()
    agent, _ = agent_define(
        game=game,
        name=f"hist{total}",
        definition=AgentDefinition(
            system_prompt="You are the keeper of the Ashmere campaign. Answer in character.",
            memory_enabled=True,
            max_open_tokens=4000,
            max_tokens=400_000,
        ),
    )
    names = memory_names()
    contents = texts(seed=1000 + total, count=MEMORY_COUNT, chars=MEMORY_CONTENT_CHARS)
    for index, (name, content) in enumerate(zip(names, contents, strict=True)):
        arguments = {
            "name": name,
            "description": f"What the party knows about thread {index}",
            "content": content,
        }
        tool_check(tool_run_atomic(transaction, tool_run, agent, "close_memory", arguments))
    for name in names[:OPEN_MEMORY_COUNT]:
        tool_check(tool_run_atomic(transaction, tool_run, agent, "open_memory", {"name": name}))

    folded = max(0, total - VERBATIM_MAX)
    if folded:
        fold_history(agent, folded, log)
    real_sends(agent, first=folded + 1, last=total)
    agent.refresh_from_db()
    if agent.last_block != total:
        raise RuntimeError(f"{agent.name} has {agent.last_block} blocks, not {total}")
    history_check(agent, total)
    log(f"built {agent.name}: {total} blocks ({folded} folded) in {time.monotonic() - began:.1f} s")
    return agent


def fold_history(agent, folded: int, log) -> None:
    """Blocks 1..folded as real play leaves them, inserted in bulk: each
    with its completed turn and cost lines, folded under one checkpoint."""
    import uuid
    from datetime import timedelta
    from decimal import Decimal

    from django.db import transaction
    from django.utils import timezone

    from agents.context import entries_tokens, memory_snapshot, render_context_block
    from agents.models import Agent, Block, Checkpoint, CheckpointKind, Turn, TurnStatus
    from billing.models import CostKind, CostLine
    from studio.tokens import count_tokens

    began = time.monotonic()
    messages = texts(seed=5000, count=256, chars=MESSAGE_CHARS)
    start = timezone.now() - timedelta(days=30)
    turns, blocks, lines = [], [], []
    token_cache: dict = {}
    for number in range(1, folded + 1):
        text = messages[number % len(messages)]
        reply = f'You said: "{text[:117]}..."'
        entries = [{"type": "message", "role": "user", "content": text}]
        if number % SCRIPTED_BLOCK_EVERY == 0:
            name = memory_names()[OPEN_MEMORY_COUNT + number % (MEMORY_COUNT - OPEN_MEMORY_COUNT)]
            for step, tool in ((1, "open_memory"), (2, "close_memory")):
                entries.append(
                    {
                        "type": "tool_call",
                        "id": f"call_{uuid.uuid4().hex[:16]}",
                        "step": step,
                        "name": tool,
                        "arguments": {"name": name},
                        "result": f"Memory '{name}' done ({tool}).",
                        "isError": False,
                    }
                )
        entries.append({"type": "message", "role": "assistant", "content": reply})
        key = (number % len(messages), number % SCRIPTED_BLOCK_EVERY == 0)
        if key not in token_cache:
            token_cache[key] = entries_tokens(entries)
        at = start + timedelta(seconds=number * 20)
        turn = Turn(
            agent=agent,
            status=TurnStatus.COMPLETED,
            block_number=number,
            reply=reply,
            started_at=at,
            ended_at=at + timedelta(milliseconds=300),
        )
        turns.append(turn)
        blocks.append(
            Block(
                agent=agent,
                number=number,
                status=TurnStatus.COMPLETED,
                entries=entries,
                tokens=token_cache[key],
                folded=True,
            )
        )
    with transaction.atomic():
        Turn.objects.bulk_create(turns, batch_size=1000)
        for turn, block in zip(turns, blocks, strict=True):
            block.turn = turn
            lines.append(
                CostLine(
                    game_id=agent.game_id,
                    agent_name=agent.name,
                    turn_id=turn.uuid,
                    kind=CostKind.MODEL,
                    label=CostKind.MODEL.label,
                    quantity=block.tokens + 200,
                    amount=Decimal("0.000300"),
                    detail={"inputTokens": block.tokens + 180, "outputTokens": 20},
                )
            )
            if len(block.entries) > 2:
                lines.append(
                    CostLine(
                        game_id=agent.game_id,
                        agent_name=agent.name,
                        turn_id=turn.uuid,
                        kind=CostKind.MEMORY_ACCESS,
                        label=CostKind.MEMORY_ACCESS.label,
                        quantity=2,
                        amount=Decimal("0.002000"),
                        detail={},
                    )
                )
        Block.objects.bulk_create(blocks, batch_size=1000)
        CostLine.objects.bulk_create(lines, batch_size=2000)
        open_memories, closed_memories = memory_snapshot(agent)
        summary = "\n".join(
            f"- user: {messages[n % len(messages)][:150]}" for n in range(folded - 79, folded + 1)
        )
        block_text = render_context_block(
            summary=summary,
            open_memories=[{k: m[k] for k in ("name", "description", "content")} for m in open_memories],
            closed_memories=closed_memories,
        )
        Checkpoint.objects.create(
            agent=agent,
            kind=CheckpointKind.COMPACTION,
            through_block=folded,
            summary=summary,
            open_memories=open_memories,
            closed_memories=closed_memories,
            context_block=block_text,
            block_tokens=count_tokens(block_text),
        )
        Agent.objects.filter(pk=agent.pk).update(last_block=folded)
    agent.last_block = folded
    log(
        f"{agent.name}: inserted {folded} folded blocks, turns and {len(lines)} cost lines in "
        f"{time.monotonic() - began:.1f} s"
    )


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


def history_check(agent, total: int) -> None:
    from agents.models import Block, Checkpoint

    verbatim = Block.objects.filter(agent_id=agent.pk, folded=False).count()
    all_blocks = Block.objects.filter(agent_id=agent.pk).count()
    checkpoints = Checkpoint.objects.filter(agent_id=agent.pk).count()
    expected_checkpoints = 1 if total > VERBATIM_MAX else 0
    if all_blocks != total or verbatim != min(total, VERBATIM_MAX) or checkpoints != expected_checkpoints:
        raise RuntimeError(
            f"{agent.name}: {all_blocks} blocks ({verbatim} verbatim), {checkpoints} checkpoints; "
            f"expected {total} ({min(total, VERBATIM_MAX)} verbatim), {expected_checkpoints}"
        )


# --- measuring ---------------------------------------------------------------------------


class Series:
    def __init__(self, agent, total: int, variant: str):
        self.agent, self.total, self.variant = agent, total, variant
        self.plain = texts(seed=3000 + total, count=64, chars=MESSAGE_CHARS)
        self.samples: list[float] = []

    def content(self, index: int) -> str:
        text = self.plain[index % len(self.plain)]
        if self.variant == "plain":
            return text
        # The first memory has been open since the build: the call changes nothing.
        return script({"call": "open_memory", "args": {"name": memory_names()[0]}}, {"say": text})

    def send(self, index: int):
        from agents.engine import turn_send

        return turn_send(agent=self.agent, content=self.content(index))

    def after(self, turn) -> None:
        from agents.engine import turn_tool_calls
        from agents.models import Agent, Block, TurnStatus

        if turn.status != TurnStatus.COMPLETED or turn.block_number != self.total + 1:
            raise RuntimeError(f"{self.variant} send to {self.agent.name} ended {turn.status}: {turn.error}")
        calls = turn_tool_calls(turn)
        if len(calls) != (0 if self.variant == "plain" else 1) or any(c["isError"] for c in calls):
            raise RuntimeError(f"{self.variant} send made these tool calls: {calls}")
        Block.objects.filter(agent_id=self.agent.pk, number__gt=self.total).delete()
        Agent.objects.filter(pk=self.agent.pk).update(last_block=self.total)

    def capture(self) -> dict:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        captures, db_seconds = [], []
        for index in range(3):
            with db_clock() as spent, CaptureQueriesContext(connection) as captured:
                turn = self.send(index)
            self.after(turn)
            captures.append(captured.captured_queries)
            db_seconds.append(spent[0])
        self.raw_queries = [q["sql"] for q in captures[0]]
        queries = [normalize_sql(sql) for sql in self.raw_queries]
        return {
            "queriesPerSend": len(queries),
            "dbMsPerSend": round(sorted(db_seconds)[1] * 1000, 3),
            "queries": queries,
            "repeatedQueries": [{"sql": s, "times": n} for s, n in Counter(queries).most_common() if n > 1],
        }


def measure(agents: dict, args, log, *, db: str):
    series = [Series(agent, total, variant) for total, agent in agents.items() for variant in VARIANTS]
    gc.collect()
    load_before = os.getloadavg()[0]
    for index in range(args.warmup + args.sends):
        for one in series:
            began = time.perf_counter()
            turn = one.send(index)
            elapsed = time.perf_counter() - began
            one.after(turn)
            if index >= args.warmup:
                one.samples.append(elapsed)
    load_after = os.getloadavg()[0]
    rows = []
    for one in series:
        row = {
            "db": db,
            "total": one.total,
            "verbatim": min(one.total, VERBATIM_MAX),
            "folded": max(0, one.total - VERBATIM_MAX),
            "variant": one.variant,
            **benchlib.percentiles(one.samples),
            **one.capture(),
            "loadAverage": [round(load_before, 2), round(load_after, 2)],
        }
        rows.append(row)
        log(
            f"{one.total:>5} blocks, {one.variant:<11}: p50 {row['p50Ms']:.2f} ms, p95 {row['p95Ms']:.2f} ms, "
            f"{row['queriesPerSend']} queries, {row['dbMsPerSend']:.2f} ms in the database"
        )
    for total, agent in agents.items():
        history_check(agent, total)
    return rows, series


SEQ_SCAN = re.compile(r"Seq Scan on (\w+)")


def explain_send(series: list, log) -> list[dict]:
    """EXPLAIN every statement of one send to the largest history; a
    sequential scan of a table over 1,000 rows is one whose cost grows with
    history (or with every other agent's)."""
    from django.db import connection

    biggest = max(s.total for s in series)
    found, seen = [], set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, reltuples::bigint FROM pg_class WHERE relkind = 'r'")
        sizes = dict(cursor.fetchall())
        for one in series:
            if one.total != biggest:
                continue
            for sql in one.raw_queries:
                head = sql.lstrip().split(None, 1)[0].upper()
                if head not in ("SELECT", "UPDATE", "DELETE"):
                    continue
                cursor.execute("EXPLAIN " + sql)
                plan = "\n".join(r[0] for r in cursor.fetchall())
                for table in SEQ_SCAN.findall(plan):
                    rows = sizes.get(table, 0)
                    if rows > 1000 and (table, normalize_sql(sql)) not in seen:
                        seen.add((table, normalize_sql(sql)))
                        found.append({"table": table, "rows": rows, "sql": normalize_sql(sql), "plan": plan})
    log(f"EXPLAIN: {len(found)} sequential scans of a table over 1,000 rows in a {biggest}-block send")
    return found


def profile_sends(agent, total: int, outdir: Path, log) -> dict:
    """pyinstrument over sends to the largest history (turn_send only, not
    the untimed rewind after each)."""
    from pyinstrument import Profiler
    from pyinstrument.session import Session

    outdir.mkdir(parents=True, exist_ok=True)
    sessions = []
    for variant, count in PROFILE_SENDS.items():
        one = Series(agent, total, variant)
        for index in range(count):
            profiler = Profiler(interval=0.0001, async_mode="disabled")
            profiler.start()
            turn = one.send(index)
            profiler.stop()
            one.after(turn)
            sessions.append(profiler.last_session)
    session = sessions[0]
    for other in sessions[1:]:
        session = Session.combine(session, other)
    path = outdir / "send_folded.txt"
    summary = profile_report.write(session, path, title=f"turn_send x{len(sessions)} to {agent.name}")
    log(f"profile of {len(sessions)} sends written to {path}")
    return summary


if __name__ == "__main__":
    sys.exit(main())
