"""(a) Platform overhead of one send (`turn_send`, scripted model) against an agent's total history.

    .venv/bin/python bench/send_overhead.py [--totals 0,200,10000] [--sends 200] [--warmup 20]
                                            [--db postgres|sqlite] [--json-out PATH]

A child process (this file, --child-output) builds one agent per total on
a fresh database: its newest 200 blocks real sends, those before inserted
in bulk and folded under a checkpoint. It then times sends to each, plain
and with one memory tool call, interleaved; each send's block is taken off
again, untimed. See bench/README.md, "How (a) builds 10,000 blocks".
"""

import argparse
import gc
import os
import re
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import benchlib
from benchlib import call, script

VERBATIM_MAX = 200
MEMORIES, OPEN_MEMORIES = 20, 2
SCRIPTED_EVERY = 5  # every 5th history block opens and closes a memory
CAPTURED_SENDS = 3
# Not counted as a send's statements (the tests' query counts do not see them either).
TRANSACTION_CONTROL = {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"}
VARIANTS = ("plain", "1 tool call")
MEMORY_NAMES = [f"note-{i:02d}" for i in range(MEMORIES)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--totals", default="0,200,10000", help="total blocks of each agent")
    parser.add_argument("--sends", type=int, default=200, help="timed sends per series (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed sends per series first (default 20)")
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    return benchlib.main("send_overhead", parser, run, child)


def run(args, log) -> dict:
    postgres = args.db == "postgres"
    name = benchlib.db_name("send")
    url = benchlib.db_recreate(args.db, postgres=name, sqlite=Path(f"/tmp/{name}.db"))
    env = benchlib.django_env(
        url,
        redis=benchlib.REDIS_URL if postgres else None,
        channels=name if postgres else None,
        STUDIO_FORCED_CHECKPOINT_BLOCKS="1000000",
        STUDIO_COMPACTION_RUNNER="none",
    )
    result = benchlib.run_child(__file__, env)
    if result is None:
        return {"failed": True, "summary": ["the benchmark process failed"]}
    table = ["| DB | Total blocks | Verbatim | Send | p50 ms | p95 ms | mean ms | Queries | DB ms/send |"]
    table.append("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in result["results"]:
        table.append(
            f"| {r['db']} | {r['total']} | {r['verbatim']} | {r['variant']} | {r['p50Ms']:.2f} | "
            f"{r['p95Ms']:.2f} | {r['meanMs']:.2f} | {r['queriesPerSend']} | {r['dbMsPerSend']:.2f} |"
        )
    table += [
        f"sequential scan of {s['table']} ({s['rows']} rows): {s['sql'][:160]}" for s in result["seqScans"]
    ]
    return result | {"summary": table}


# --- the child: build the agents, then time their sends ----------------------------------


def child(args, log) -> dict:
    connection = benchlib.django_setup()
    from studio.services import game_create

    agents = {}
    for total in (int(t) for t in args.totals.split(",")):
        game, _ = game_create(slug=f"bench-{total}", credits=10**9)  # an account row of its own
        agents[total] = build_agent(game, total, log)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")  # as autovacuum would have by now
    series = [Series(agent, total, variant) for total, agent in agents.items() for variant in VARIANTS]
    gc.collect()
    load = [round(os.getloadavg()[0], 2)]
    for index in range(args.warmup + args.sends):  # interleaved: drift falls on every series alike
        for one in series:
            one.send(index, timed=index >= args.warmup)
    load.append(round(os.getloadavg()[0], 2))
    rows = []
    for one in series:
        row = {
            "db": args.db,
            "total": one.total,
            "verbatim": min(one.total, VERBATIM_MAX),
            "loadAverage": load,
        }
        rows.append(row | {"variant": one.variant} | benchlib.percentiles(one.samples) | one.capture())
        log(
            f"{one.total:>5} blocks, {one.variant}: p50 {rows[-1]['p50Ms']:.2f} ms, {rows[-1]['queriesPerSend']} queries"
        )
    for total, agent in agents.items():
        history_check(agent, total)
    result = {"results": rows, "identicalDefinition": identical_definitions(agents[max(agents)], args.sends)}
    log(f"an identical definition: p50 {result['identicalDefinition']['p50Ms']:.2f} ms")
    largest = [one for one in series if one.total == max(agents)]
    result["seqScans"] = explain(largest, log) if connection.vendor == "postgresql" else []
    return result


def build_agent(game, total: int, log):
    from django.db import transaction

    from agents.services import AgentDefinition, agent_define
    from memories.tools import tool_run

    began = time.monotonic()
    prompt = "You are the keeper of the Ashmere campaign. Answer in character."
    limits = {"max_open_tokens": 4000, "max_tokens": 400_000}
    definition = AgentDefinition(system_prompt=prompt, memory_enabled=True, **limits)
    agent, _ = agent_define(game=game, name=f"hist{total}", definition=definition, by=None, via="command")
    steps = []
    for i, name in enumerate(MEMORY_NAMES):  # ~300 characters each
        text = (benchlib.player_message(total + i) + " " + benchlib.player_message(i))[:300]
        steps.append(
            call("close_memory", name=name, description=f"What the party knows of {i}", content=text)
        )
    for step in steps + [call("open_memory", name=name) for name in MEMORY_NAMES[:OPEN_MEMORIES]]:
        with transaction.atomic():
            result = tool_run(agent=agent, name=step["call"], arguments=step["args"])
        if result.is_error:
            raise RuntimeError(f"memory tool failed while building: {result.text}")
    folded = max(0, total - VERBATIM_MAX)
    if folded:
        fold_history(agent, folded)
    for number in range(folded + 1, total + 1):
        turn = turn_send(agent, block_content(number))
        if turn.status != "completed":
            raise RuntimeError(f"history send {number} ended {turn.status}: {turn.error}")
    history_check(agent, total)
    log(f"built {agent.name}: {total} blocks ({folded} folded) in {time.monotonic() - began:.1f} s")
    return agent


def turn_send(agent, content: str):
    from tests.support.sending import turn_send

    return turn_send(agent=agent, content=content)


def block_content(number: int) -> str:
    """What block `number` of a history was sent: every 5th opens and closes a closed memory."""
    text = benchlib.player_message(number)
    if number % SCRIPTED_EVERY:
        return text
    name = MEMORY_NAMES[OPEN_MEMORIES + (number // SCRIPTED_EVERY) % (MEMORIES - OPEN_MEMORIES)]
    return script(call("open_memory", name=name), call("close_memory", name=name), {"say": text})


def fold_history(agent, folded: int) -> None:
    """Blocks 1..folded as real play leaves them, inserted in bulk, each
    with its completed turn and cost lines, folded under one checkpoint."""
    from datetime import timedelta
    from decimal import Decimal

    from django.db import transaction
    from django.utils import timezone

    from agents.compaction import checkpoint_write
    from agents.models import Agent, Block, CheckpointKind, Turn
    from agents.sending.context import entries_tokens
    from billing.models import CostKind, CostLine

    start = timezone.now() - timedelta(days=30)
    turns, blocks, lines = [], [], []
    for number in range(1, folded + 1):
        text = benchlib.player_message(number)
        entries = [{"type": "message", "role": "user", "content": text}]
        if number % SCRIPTED_EVERY == 0:
            for step, tool in ((1, "open_memory"), (2, "close_memory")):
                arguments, result = {"name": MEMORY_NAMES[-1]}, f"Memory '{MEMORY_NAMES[-1]}' done ({tool})."
                entries.append(
                    {"type": "tool_call", "id": f"call_{number}_{step}", "step": step, "name": tool}
                    | {"arguments": arguments, "result": result, "isError": False}
                )
        entries.append({"type": "message", "role": "assistant", "content": f'You said: "{text[:117]}..."'})
        at = start + timedelta(seconds=number * 20)
        turn = Turn(agent=agent, status="completed", block_number=number, reply=entries[-1]["content"])
        turn.started_at, turn.ended_at = at, at + timedelta(milliseconds=300)
        block = Block(agent=agent, number=number, status="completed", entries=entries, folded=True)
        block.turn, block.tokens = turn, entries_tokens(entries)
        turns.append(turn)
        blocks.append(block)
        costs = [(CostKind.MODEL, block.tokens + 200, "0.0003")]
        costs += [(CostKind.MEMORY_ACCESS, 2, "0.002")] * (number % SCRIPTED_EVERY == 0)
        for kind, quantity, amount in costs:
            line = {"game_id": agent.game_id, "agent_name": agent.name, "turn_id": turn.uuid, "kind": kind}
            line |= {"label": kind.label, "quantity": quantity, "amount": Decimal(amount)}
            detail = {"inputTokens": block.tokens + 180, "outputTokens": 20} if kind == CostKind.MODEL else {}
            lines.append(CostLine(**line, detail=detail))
    summary = "\n".join(f"- user: {benchlib.player_message(n)[:150]}" for n in range(folded - 79, folded + 1))
    with transaction.atomic():
        Turn.objects.bulk_create(turns, batch_size=1000)
        Block.objects.bulk_create(blocks, batch_size=1000)
        CostLine.objects.bulk_create(lines, batch_size=2000)
        checkpoint_write(agent=agent, kind=CheckpointKind.COMPACTION, through_block=folded, summary=summary)
        Agent.objects.filter(pk=agent.pk).update(last_block=folded)
    agent.last_block = folded


def history_check(agent, total: int) -> None:
    blocks = list(agent.blocks.values_list("folded", flat=True))
    verbatim, checkpoints = blocks.count(False), agent.checkpoints.count()
    if (len(blocks), verbatim, checkpoints) != (total, min(total, VERBATIM_MAX), int(total > VERBATIM_MAX)):
        raise RuntimeError(
            f"{agent.name}: {len(blocks)} blocks, {verbatim} verbatim, {checkpoints} checkpoints"
        )


# --- measuring -----------------------------------------------------------------------------


class Series:
    """Sends of one variant to one agent, each seeing exactly `total`
    blocks: the block a send adds is taken off after it, untimed (its turn
    and cost lines stay, as in production)."""

    def __init__(self, agent, total: int, variant: str):
        self.agent, self.total, self.variant = agent, total, variant
        self.samples: list[float] = []

    def content(self, index: int) -> str:
        text = benchlib.player_message(3000 + self.total + index % 64)
        if self.variant == "plain":
            return text
        # The first memory has been open since the build: the call changes nothing.
        return script(call("open_memory", name=MEMORY_NAMES[0]), {"say": text})

    def send(self, index: int, *, timed: bool = False):
        began = time.perf_counter()
        turn = turn_send(self.agent, self.content(index))
        if timed:
            self.samples.append(time.perf_counter() - began)
        self.after(turn)
        return turn

    def after(self, turn, *, kept: int = 0) -> None:
        """Check the send, then take its block off (and the `kept` ones before it)."""
        from agents.models import Agent
        from agents.wire import turn_tool_calls

        calls, ended = (
            turn_tool_calls(turn),
            turn.status == "completed" and turn.block_number == self.total + 1 + kept,
        )
        if not ended or len(calls) != (self.variant != "plain") or any(c["isError"] for c in calls):
            raise RuntimeError(
                f"{self.variant} send to {self.agent.name}: {turn.status} {turn.error} {calls}"
            )
        self.agent.blocks.filter(number__gt=self.total).delete()
        Agent.objects.filter(pk=self.agent.pk).update(last_block=self.total)

    def capture(self) -> dict:
        """Statements and time in the database of a few more sends (untimed)."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from agents.sending import context

        captures, db_seconds = [], []
        for index in range(CAPTURED_SENDS):
            # Each captured send follows one whose block stays, as in play. The
            # blocks taken off after other sends left this process's verbatim
            # blocks of the agent ahead of the database: start them afresh.
            context._verbatim_cache.entries.clear()
            turn_send(self.agent, self.content(index))
            with db_clock() as spent, CaptureQueriesContext(connection) as captured:
                turn = turn_send(self.agent, self.content(index))
            self.after(turn, kept=1)
            captures.append(captured.captured_queries)
            db_seconds.append(spent[0])
        self.raw_queries = [q["sql"] for q in captures[0]]
        queries = [normalize_sql(sql) for sql in self.raw_queries]
        control = [q for q in queries if q.split(" ", 1)[0] in TRANSACTION_CONTROL]
        return {
            "queriesPerSend": len(queries) - len(control),
            "transactionControlPerSend": len(control),
            "dbMsPerSend": round(statistics.median(db_seconds) * 1000, 3),
            "queries": queries,
        }


def identical_definitions(agent, count: int) -> dict:
    """Constructing `agent` again with the config it has (what game code
    that defines its agents at the top of every event handler does): its
    time, and its statements (there must be one: the agent, read with its
    stats; nothing written)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.services import AgentDefinition, agent_construct

    definition = AgentDefinition(
        system_prompt=agent.system_prompt,
        model=agent.model,
        memory_enabled=agent.memory_enabled,
        max_open_tokens=agent.max_open_tokens,
        compaction_type=agent.compaction_type,
        max_tokens=agent.max_tokens,
    )
    samples = []
    for _ in range(count):
        began = time.perf_counter()
        defined = agent_construct(
            game=agent.game, name=agent.name, definition=definition, by=None, via="command"
        )
        samples.append(time.perf_counter() - began)
        if defined.created or defined.stats is None:
            raise RuntimeError("an identical definition wrote the agent")
    with CaptureQueriesContext(connection) as captured:
        agent_construct(game=agent.game, name=agent.name, definition=definition, by=None, via="command")
    return benchlib.percentiles(samples) | {"statements": len(captured.captured_queries)}


@contextmanager
def db_clock():
    """Seconds the client waits on the database — every statement (BEGIN
    included) and every COMMIT — added up in `spent[0]`."""
    from django.db import connection

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


_NUMBER = re.compile(r"(?<![\w\"])-?\d+(?:\.\d+)?(?![\w\"])")
_INSERT = re.compile(r"^(INSERT INTO \S+) \(.*?\) VALUES .*?(RETURNING .*)?$", re.S)


def normalize_sql(sql: str) -> str:
    """The statement without its values, column lists shortened, so repeats read as one."""
    text = _NUMBER.sub("?", re.sub(r"'(?:[^']|'')*'", "?", re.sub(r"\s+", " ", sql).strip()))
    text = re.sub(r"^SELECT .+? FROM ", lambda m: "SELECT … FROM " if m[0].count(",") > 1 else m[0], text)
    return _INSERT.sub(lambda m: f"{m[1]} (…) VALUES (…)" + (f" {m[2]}" if m[2] else ""), text)


def explain(series: list, log) -> list[dict]:
    """EXPLAIN each statement of the sends of `series`: a sequential scan of
    a table over 1,000 rows grows with history (or with every other agent's)."""
    from django.db import connection

    found = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, reltuples::bigint FROM pg_class WHERE relkind = 'r'")
        sizes = dict(cursor.fetchall())
        for sql in (sql for one in series for sql in one.raw_queries):
            if sql.lstrip().split(None, 1)[0].upper() in ("SELECT", "UPDATE", "DELETE"):
                cursor.execute("EXPLAIN " + sql)
                plan = "\n".join(r[0] for r in cursor.fetchall())
                for table in re.findall(r"Seq Scan on (\w+)", plan):
                    if sizes.get(table, 0) > 1000:
                        found[(table, normalize_sql(sql))] = {"rows": sizes[table], "plan": plan}
    log(f"EXPLAIN: {len(found)} sequential scans of a table over 1,000 rows")
    return [{"table": table, "sql": sql, **rest} for (table, sql), rest in found.items()]


if __name__ == "__main__":
    sys.exit(main())
