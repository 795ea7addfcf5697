"""Growth per turn: what each table gains per turn on PostgreSQL, and what `prune` leaves.

    .venv/bin/python bench/growth.py [--turns 400] [--json-out PATH]

A child process plays --turns sends to one agent on a fresh database as a
game would: ~200-character player messages, ~600-character replies, a
memory write every third turn (two memories of ~1,500 characters, one held
open, which the compactor also rewrites), one transient send in ten, and
compactions as the context fills (maxTokens 16,000). Then, per table: its
rows' bytes (pg_column_size, values as stored: compressed, TOAST included)
and its indexes' share, per turn. Then every record is aged 60 days and
`prune` runs (twice, as a daily timer would) with every STUDIO_RETAIN_* at
30: what is left. Not part of `make bench` (it times nothing).
"""

import argparse
import json
import random
import sys

import benchlib
from benchlib import call

TABLES = {
    "blocks": "agents_block",
    "memory changes": "memories_memoryevent",
    "checkpoints": "agents_checkpoint",
    "turns": "agents_turn",
    "cost lines": "billing_costline",
    "compactions": "agents_compaction",
    "memories": "memories_memory",
    "kept stores": "memories_storebaseline",
}
RETAIN = ("HISTORY", "MEMORY_CHANGES", "TURNS", "COST_LINES")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=600, help="sends to play (default 600)")
    parser.add_argument("--memory-chars", type=int, default=1500, help="a memory's content (default 1500)")
    parser.add_argument("--write-every", type=int, default=3, help="turns per memory write (default 3)")
    return benchlib.main("growth", parser, run, child)


def run(args, log) -> dict:
    name = benchlib.db_name("growth")
    url = benchlib.db_recreate("postgres", postgres=name, sqlite=None)
    retain = {f"STUDIO_RETAIN_{kind}_DAYS": "30" for kind in RETAIN}
    env = benchlib.django_env(
        url, STUDIO_COMPACTION_RUNNER="inline", STUDIO_FORCED_CHECKPOINT_BLOCKS="200", **retain
    )
    result = benchlib.run_child(__file__, env)
    if result is None:
        return {"failed": True, "summary": ["the benchmark process failed"]}
    table = [f"Per turn, over {result['turns']} turns ({result['played']} played, the rest transient):"]
    table.append("| table | rows' bytes | indexes | after prune (kept) |")
    table.append("|---|---:|---:|---:|")
    for kind, row in result["tables"].items():
        table.append(
            f"| {kind} | {row['rowBytes']:,.0f} | {row['indexBytes']:,.0f} | {row['afterPruneRowBytes']:,.0f} |"
        )
    table.append(f"| all | {result['rowBytes']:,.0f} | {result['indexBytes']:,.0f} | |")
    table.append(
        f"A second copy of each reply on its turn would add {result['replyCopyBytes']:,.0f} bytes per turn."
    )
    return result | {"summary": table}


# --- the child: play, measure, prune, measure ---------------------------------------------------


def child(args, log) -> dict:
    connection = benchlib.django_setup()
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    from agents.models import Block, Checkpoint, Turn
    from agents.services import AgentDefinition, agent_define
    from billing.models import CostLine
    from memories.models import MemoryEvent
    from studio.services import game_create
    from tests.support.sending import turn_send

    game, _ = game_create(slug="growth", credits=10**9)
    definition = AgentDefinition(
        system_prompt="You are the keeper of the Ashmere campaign. Answer in character.",
        memory_enabled=True,
        max_open_tokens=2000,
        max_tokens=16_000,
    )
    agent, _ = agent_define(game=game, name="keeper", definition=definition, by=None, via="command")
    played = 0
    for index in range(args.turns):
        transient = index % 10 == 9
        content = message(index, memory_chars=args.memory_chars, write_every=args.write_every)
        turn = turn_send(agent=agent, content=content, transient=transient)
        if turn.status != "completed":
            raise RuntimeError(f"turn {index} ended {turn.status}: {turn.error}")
        played += not transient
        agent.refresh_from_db()
    log(f"{args.turns} turns, {agent.last_block} blocks, {Checkpoint.objects.count()} checkpoints")
    before = measure(connection, args.turns)
    reply_copy = per_turn(connection, args.turns, REPLY_COPY_SQL)

    then = timezone.now() - timedelta(days=60)
    for model in (Block, Turn, MemoryEvent, CostLine, Checkpoint):
        model.objects.update(created_at=then)
    for _ in range(2):  # as a daily timer would: the second takes the lines of turns the first pruned
        call_command("prune", stdout=sys.stderr)
    after = measure(connection, args.turns)
    tables = {
        kind: before[kind] | {"afterPruneRowBytes": after[kind]["rowBytes"]}
        for kind in TABLES
        if kind in before
    }
    return {
        "turns": args.turns,
        "played": played,
        "tables": tables,
        "rowBytes": sum(row["rowBytes"] for row in before.values()),
        "indexBytes": sum(row["indexBytes"] for row in before.values()),
        "replyCopyBytes": reply_copy,
    }


SYLLABLES = (
    "an bel cor dun eth far gal hin isk jor kel lum mar nor ost pel quin ros sul tam ur vel wyn yor".split()
)


def prose(seed: int, chars: int) -> str:
    """`chars` characters of made-up words: text that compresses about as
    prose does, not as a repeated line would."""
    rng = random.Random(seed)
    words = []
    while sum(len(word) + 1 for word in words) < chars:
        words.append("".join(rng.choice(SYLLABLES) for _ in range(rng.choice((1, 1, 2, 2, 3)))))
    return " ".join(words)[:chars]


def message(index: int, *, memory_chars: int, write_every: int) -> str:
    """The player's message of turn `index` (~200 characters), with the
    ~600-character reply the scripted model says; every `write_every`th
    turn writes a memory of `memory_chars` first."""
    reply = prose(index, 600)
    player = prose(-index - 1, 200)
    if index % write_every:
        return said(player, {"say": reply})
    name = "quest" if (index // write_every) % 2 else "npcs"
    content = prose(10_000 + index, memory_chars)
    steps = [call("close_memory", name=name, description=f"What the party knows: {name}", content=content)]
    if name == "quest":
        steps.append(call("open_memory", name="quest"))
        reply += f"\n@memory quest: {content[: memory_chars // 2]}"  # the compactor rewrites it
    return said(player, *steps, {"say": reply})


def said(player: str, *steps) -> str:
    """A message the `scripted` model plays, with the player's words beside its steps."""
    return json.dumps({"player": player, "script": list(steps)})


# A played turn's reply, as a second copy on its row would take it.
REPLY_COPY_SQL = (
    "SELECT coalesce(sum(pg_column_size(b.entries -> -1 ->> 'content')), 0) FROM agents_block b "
    "JOIN agents_turn t ON t.id = b.turn_id WHERE t.status = 'completed' AND t.reply = ''"
)


def per_turn(connection, turns: int, sql: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return float(cursor.fetchone()[0]) / turns


def measure(connection, turns: int) -> dict:
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    sizes = {}
    for kind, table in TABLES.items():
        rows = per_turn(connection, turns, f"SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t")
        indexes = per_turn(connection, turns, f"SELECT pg_indexes_size('{table}')")
        sizes[kind] = {"rowBytes": rows, "indexBytes": indexes}
    return sizes


if __name__ == "__main__":
    sys.exit(main())
