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
import json
import re
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import benchlib  # noqa: E402
import profile_report  # noqa: E402
import send_overhead  # noqa: E402
from send_overhead import (  # noqa: E402 — the memory, message and send builders of send_overhead.py
    MEMORY_COUNT,
    MESSAGE_CHARS,
    OPEN_MEMORY_COUNT,
    SCRIPTED_BLOCK_EVERY,
    interleave,
    memories_write,
    memory_names,
    normalize_sql,
    real_sends,
    row_counts,
    row_line,
    texts,
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
    postgres = args.db == "postgres"
    url = benchlib.db_recreate(args.db, postgres=POSTGRES_DB, sqlite=SQLITE_PATH)
    env = benchlib.django_env(
        url,
        drop=("STUDIO_", "DJANGO_"),
        # Redis as the channel layer with PostgreSQL; none (events stay in the process) with SQLite.
        redis=benchlib.REDIS_URL if postgres else None,
        channels=POSTGRES_DB if postgres else None,
        STUDIO_FORCED_CHECKPOINT_BLOCKS="1000000",
        STUDIO_COMPACTION_RUNNER="none",
    )
    command = ["--child", "--sends", str(args.sends), "--warmup", str(args.warmup), "--db", args.db]
    if args.profile:
        command += ["--profile", str(args.profile.resolve())]
    child = benchlib.run_child(
        __file__,
        command,
        env,
        output_option="--json-out",
        label="send_folded",
        tmp_prefix="studio-bench-folded-",
    )
    if child is None:
        return 1
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
    return send_overhead.markdown_table(
        rows,
        blocks={"Total blocks": "total", "Verbatim": "verbatim"},
        queries="Queries",
        db_time="DB ms/send",
    )


# --- the child ---------------------------------------------------------------------------


def child_main(args) -> int:
    benchlib.django_setup()
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
        "database": {"vendor": connection.vendor, "version": benchlib.django_db_version(connection)},
        "rowsAtEnd": row_counts(checkpoints=True),
    }
    if args.profile:
        result["profile"] = profile_sends(agents[TOTALS[-1]], TOTALS[-1], args.profile, log)
    args.json_out.write_text(json.dumps(result))
    log(f"done in {time.monotonic() - started:.1f} s")
    return 0


# --- building the agents -----------------------------------------------------------------


def build_agent(game, total: int, log):
    from agents.services import AgentDefinition, agent_define

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
    memories_write(agent, seed=1000 + total)
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

    def cost_line(turn, kind: CostKind, quantity: int, amount: str, detail: dict) -> CostLine:
        return CostLine(
            game_id=agent.game_id,
            agent_name=agent.name,
            turn_id=turn.uuid,
            kind=kind,
            label=kind.label,
            quantity=quantity,
            amount=Decimal(amount),
            detail=detail,
        )

    with transaction.atomic():
        Turn.objects.bulk_create(turns, batch_size=1000)
        for turn, block in zip(turns, blocks, strict=True):
            block.turn = turn
            detail = {"inputTokens": block.tokens + 180, "outputTokens": 20}
            lines.append(cost_line(turn, CostKind.MODEL, block.tokens + 200, "0.000300", detail))
            if len(block.entries) > 2:
                lines.append(cost_line(turn, CostKind.MEMORY_ACCESS, 2, "0.002000", {}))
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


class Series(send_overhead.Series):
    """send_overhead.py's series (`history` is the total, folded blocks
    included), checking the tool calls of every send and capturing the SQL
    of 3 sends."""

    captured_sends = 3
    same_queries = False
    check_tools_always = True


def measure(agents: dict, args, log, *, db: str):
    series = [Series(agent, total, variant) for total, agent in agents.items() for variant in VARIANTS]
    load_before, load_after = interleave(series, args)
    rows = []
    for one in series:
        row = {
            "db": db,
            "total": one.history,
            "verbatim": min(one.history, VERBATIM_MAX),
            "folded": max(0, one.history - VERBATIM_MAX),
            "variant": one.variant,
            **benchlib.percentiles(one.samples),
            **one.capture(),
            "loadAverage": [load_before, load_after],
        }
        rows.append(row)
        log(row_line(one, row, width=5))
    for total, agent in agents.items():
        history_check(agent, total)
    return rows, series


SEQ_SCAN = re.compile(r"Seq Scan on (\w+)")


def explain_send(series: list, log) -> list[dict]:
    """EXPLAIN every statement of one send to the largest history; a
    sequential scan of a table over 1,000 rows is one whose cost grows with
    history (or with every other agent's)."""
    from django.db import connection

    biggest = max(s.history for s in series)
    found, seen = [], set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, reltuples::bigint FROM pg_class WHERE relkind = 'r'")
        sizes = dict(cursor.fetchall())
        for one in series:
            if one.history != biggest:
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
            turn = one.turn(index)
            profiler.stop()
            one.after_send(turn)
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
