"""(e) Compaction under a long conversation: who waits, how long it takes, what is kept.

    .venv/bin/python bench/compaction.py [--config embedded|scale|both] [--sends 500] [--latency-ms 200]
                                         [--max-tokens 4000] [--time-limit S] [--name NAME] [--json-out PATH]

For each configuration a child process (this file, --child-output) sends
N player messages to one agent through `turn_send`, the scripted model
delayed on every call (chat and compactor alike): embedded is SQLite with
the thread runner, scale PostgreSQL and Redis with a Celery worker. Its
databases are studio_bench_NAME and /tmp/studio_bench_NAME.sqlite3, made
anew (a run holds /tmp/studio_bench_NAME.lock; BENCH_DB_PREFIX replaces
studio_bench). See bench/README.md.
"""

import argparse
import fcntl
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import benchlib
from benchlib import call, script

CONFIGS = {"embedded": ("sqlite", "thread"), "scale": ("postgres", "celery")}
MAX_OPEN_TOKENS = 1000
MESSAGE_TOKENS = (60, 120)
MEMORY_LINE_EVERY, TOOL_SEND_EVERY = 10, 50
LIVE_COMPACTION_WAIT_SECONDS = 120  # at the end, for a compaction still running
SYSTEM_PROMPT = (
    "You are the keeper of the Ashmere campaign, the game master for one player, Mara. "
    "Keep the story straight and answer in character. Keep a memory named `quest` open at "
    "all times: what Mara is trying to do right now, and why. Keep `npcs` (everyone she has "
    "met and what they think of her) and `world` (places, factions, rules you have "
    "established) closed; open one when the scene turns to it, write what changed, and close it again."
)
MEMORIES = (
    (
        "quest",
        "What Mara is trying to do right now, and why",
        "Reach the drowned chapel below Ashmere and recover the silver key; she believes it "
        "opens her sister Ilsa's sealed house on the mill road.",
    ),
    (
        "npcs",
        "Everyone Mara has met and what they think of her",
        "Oskar the ferryman: owes her a crossing, distrusts her. Brother Aldous of the abbey: "
        "kind, hiding something about the bell. Captain Hale of the north gate: wants the "
        "toll paid in silver, not promises.",
    ),
    (
        "world",
        "Places, factions and rules established so far",
        "Ashmere floods at every new moon; the chapel is reachable only at low tide. The "
        "Lantern Guild controls the harbour. Iron burns the drowned dead.",
    ),
)
QUEST_UPDATES = (
    "Find out who paid for the new bell; Brother Aldous is hiding it, and it is tied to Ilsa.",
    "Get the silver key out of Ashmere before the Lantern Guild learns she has it.",
    "Reach Ilsa's sealed house on the mill road at low tide and open it with the silver key.",
    "Follow the raven to the crypt under the abbey; Ilsa's song seems to lead there.",
)
NPC_NOTES = (
    "Oskar now trusts her a little after she paid double at the ford.",
    "Brother Aldous admitted the bell was paid for by the Lantern Guild.",
    "Captain Hale let her through but will remember the missing seventh coin.",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=("embedded", "scale", "both"), default="both")
    parser.add_argument("--sends", type=int, default=500, help="sends to the agent (default 500)")
    parser.add_argument("--latency-ms", type=int, default=200, help="delay of every scripted model call")
    parser.add_argument("--max-tokens", type=int, default=4000, help="the agent's maxTokens (default 4000)")
    parser.add_argument("--time-limit", type=int, default=1800, help="seconds of sending, at most")
    parser.add_argument("--name", default="compaction", help="its databases' name (studio_bench_NAME)")
    parser.add_argument("--child", choices=tuple(CONFIGS), help=argparse.SUPPRESS)
    return benchlib.main("compaction", parser, run, child)


def run(args, log) -> dict:
    name = benchlib.db_name(args.name)
    lock = open(f"/tmp/{name}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a second run would drop the first one's database
    except BlockingIOError:
        return {"failed": True, "summary": [f"another run holds {lock.name}; try again when it ends"]}
    runs = {}
    for config in CONFIGS if args.config == "both" else (args.config,):
        db, runner = CONFIGS[config]
        print(f"== {config}: {args.sends} sends, {args.latency_ms} ms model, the {runner} runner")
        url = benchlib.db_recreate(db, postgres=name, sqlite=Path(f"/tmp/{name}.sqlite3"))
        # Every STUDIO_* at its default but these; on scale a Celery queue of the run's own.
        env = benchlib.django_env(
            url,
            drop=("STUDIO_",),
            redis=benchlib.REDIS_URL if runner == "celery" else None,
            STUDIO_SCRIPTED_LATENCY_MS=str(args.latency_ms),
            STUDIO_COMPACTION_RUNNER=runner,
            STUDIO_CELERY_QUEUE=f"bench-compaction-{uuid.uuid4().hex[:8]}",
        )
        runs[config] = benchlib.run_child(__file__, env, "--child", config)
    failed = [name for name, result in runs.items() if result is None]
    runs = {name: result for name, result in runs.items() if result is not None}
    problems = [f"{name}: {p}" for name, result in runs.items() for p in result["problems"]]
    settings = {"sends": args.sends, "latencyMs": args.latency_ms, "maxTokens": args.max_tokens}
    settings.update(maxOpenTokens=MAX_OPEN_TOKENS, configs={name: CONFIGS[name] for name in runs})
    summary = [table(runs)] if runs else []
    summary += [f"PROBLEM {p}" for p in problems] + [f"FAILED {name}" for name in failed]
    return {"settings": settings, "runs": runs, "failed": failed + problems, "summary": summary}


# The table of a run, one row per figure: its label, then how a run's results fill it in.
ROWS = """
Database · compaction runner :: {database} · {runner}
Sends (failed) :: {sends[count]} ({sends[failed]})
… failed: raised a DB error / compaction wait timed out :: {sends[raised]} / {sends[waitTimedOut]}
Total time s :: {sends[totalSeconds]:.1f}
Send latency p50 / p95 ms :: {sends[p50Ms]:,.0f} / {sends[p95Ms]:,.0f}
Sends that waited on a compaction :: {waits[count]} ({waits[percent]:.1f}%)
Wait p50 / p95 ms (of those) :: {waits[p50Ms]:,.0f} / {waits[p95Ms]:,.0f}
Compactions: done / failed :: {compactions[done]} / {compactions[failed]}
… threshold / forced :: {compactions[threshold]} / {compactions[forced]}
… retried (attempts > 1) :: {compactions[retried]}
Compaction time p50 / p95 ms (started → done) :: {compactions[run][p50Ms]:,.0f} / {compactions[run][p95Ms]:,.0f}
Queue → done p50 / p95 ms :: {compactions[queueToDone][p50Ms]:,.0f} / {compactions[queueToDone][p95Ms]:,.0f}
Checkpoints written (compaction / forced) :: {checkpoints[count]} ({checkpoints[compaction]} / {checkpoints[forced]})
Final context tokens / maxTokens :: {context[finalTokens]:,} / {context[maxTokens]:,}
Largest model input; calls over maxTokens :: {context[maxModelInputTokens]:,}; {context[callsOverMaxTokens]}
Checkpoint block tokens (final / largest) :: {checkpoints[finalBlockTokens]:,} / {checkpoints[maxBlockTokens]:,}
Every block 1..N in history :: {history[intact]} (N = {history[lastBlock]})
Folded / verbatim blocks :: {history[folded]} / {history[verbatim]}
Compaction cost lines = compactions with a model call :: {ledger[ok]} ({ledger[compactionLines]} = {ledger[compactionsWithModelCall]})
Compaction tokens / chat tokens :: {ledger[compactionTokens]:,} / {ledger[modelTokens]:,}
`quest` rewrites by the compactor: applied / dropped :: {memories[compactorUpdated]} / {memories[compactorDropped]}
"""


def table(runs: dict) -> str:
    """One column per configuration, one row per figure."""
    lines = ["| | " + " | ".join(runs) + " |", "|---|" + "---:|" * len(runs)]
    for label, cell in (row.split(" :: ") for row in ROWS.strip().splitlines()):
        lines.append(f"| {label} | " + " | ".join(format_cell(cell, run) for run in runs.values()) + " |")
    return "\n".join(lines)


def format_cell(cell: str, run: dict) -> str:
    try:
        return cell.format(**run).replace("True", "yes").replace("False", "NO")
    except (KeyError, TypeError, ValueError):  # a figure with no value (no compaction ran, none waited)
        return "–"


# --- the child: one configuration -----------------------------------------------------------


def child(args, log) -> dict:
    connection = benchlib.django_setup()
    from django.conf import settings

    from studio.services import game_create

    runner = settings.STUDIO["COMPACTION_RUNNER"]
    game, _ = game_create(slug=f"bench-compaction-{args.child}", credits=10**9)
    worker = CeleryWorker(log) if runner == "celery" else None
    try:
        result = conversation(game, args, log)
    finally:
        errors = worker.stop() if worker else []
    if errors:
        result["problems"].append(f"the celery worker logged {len(errors)} error lines: {errors[:5]}")
    result.update(runner=runner, database=connection.vendor, settings=dict(sorted(settings.STUDIO.items())))
    return result


class CeleryWorker:
    """A real worker on the child's database, Redis and queue, started after
    the queue is purged, stopped with a warm shutdown (it finishes the task
    in hand); `stop` returns the error lines of its log."""

    def __init__(self, log):
        from django.conf import settings

        from studio.celery import app

        queue = settings.CELERY_TASK_DEFAULT_QUEUE
        name, purged = f"celery@{queue}", app.control.purge()
        self.log = tempfile.NamedTemporaryFile("w+", prefix="studio-bench-celery-", suffix=".log")
        options = f"-Q {queue} -n {name} -l warning --without-gossip --without-mingle --without-heartbeat"
        command = [sys.executable, "-m", "celery", "-A", "studio", "worker", "--pool=solo", *options.split()]
        self.process = subprocess.Popen(
            command, cwd=benchlib.REPO_ROOT, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            if app.control.ping(destination=[name], timeout=0.5):
                log(f"celery worker {name} up (purged {purged} queued tasks)")
                return
        self.stop()
        raise RuntimeError(f"the Celery worker did not start: {Path(self.log.name).read_text()[-3000:]}")

    def stop(self) -> list[str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        text = Path(self.log.name).read_text(errors="replace")
        self.log.close()
        return [
            line for line in text.splitlines() if any(w in line for w in ("ERROR", "CRITICAL", "Traceback"))
        ]


def player_messages(count: int) -> list[str]:
    """`count` player messages of MESSAGE_TOKENS tokens, the same every run."""
    from studio.tokens import count_tokens

    rng, messages = random.Random(4000), []
    for index in range(1, count + 1):
        tool_send = index % TOOL_SEND_EVERY == 0
        memory_line = index % MEMORY_LINE_EVERY == 0 and not tool_send
        target = rng.randint(*MESSAGE_TOKENS) - (25 if memory_line else 0)  # the @memory line adds ~25
        sentences: list[str] = []
        while count_tokens(" ".join(sentences)) < target:
            sentences.append(rng.choice(benchlib.PLAYER_LINES))
        text = " ".join(sentences)
        if memory_line:
            quest = QUEST_UPDATES[(index // MEMORY_LINE_EVERY) % len(QUEST_UPDATES)]
            text += f"\n@memory quest: {quest} (as of send {index})"
        if tool_send:  # an agent files a note: open npcs, close it with new content
            note = f"{MEMORIES[1][2]} {NPC_NOTES[(index // TOOL_SEND_EVERY) % len(NPC_NOTES)]} (as of send {index})"
            npcs = (call("open_memory", name="npcs"), call("close_memory", name="npcs", content=note))
            text = script(*npcs, {"say": text})
        messages.append(text)
    return messages


def conversation(game, args, log) -> dict:
    from agents.providers.scripted import ScriptedProvider
    from agents.sending.context import context_assemble
    from agents.services import AgentDefinition, agent_define
    from agents.wire import turn_tool_calls
    from tests.support.sending import turn_send

    limits = {"max_open_tokens": MAX_OPEN_TOKENS, "max_tokens": args.max_tokens}
    definition = AgentDefinition(system_prompt=SYSTEM_PROMPT, memory_enabled=True, **limits)
    agent, _ = agent_define(game=game, name="keeper", definition=definition, by=None, via="command")
    inputs, complete = [], ScriptedProvider.complete  # the input tokens of every chat call

    def recorded(provider, request, control):
        inputs.append(request.input_tokens)
        return complete(provider, request, control)

    ScriptedProvider.complete = recorded
    steps = [call("close_memory", name=n, description=d, content=c) for n, d, c in MEMORIES]
    steps += [call("open_memory", name="quest"), {"say": "The rain has not stopped. Where do you go first?"}]
    sent = [script(*steps)]
    turn = turn_send(agent=agent, content=sent[0])
    if turn.status != "completed" or len(turn_tool_calls(turn)) != 4:
        raise RuntimeError(f"the setup send ended {turn.status}: {turn_tool_calls(turn)}")

    messages, samples, statuses, errors = player_messages(args.sends), [], Counter(), []
    began = time.perf_counter()
    for index, content in enumerate(messages, 1):
        if time.perf_counter() - began > args.time_limit:
            log(f"stopping after {index - 1} sends: past the time limit of {args.time_limit} s")
            break
        t0 = time.perf_counter()
        try:
            turn = turn_send(agent=agent, content=content)
            statuses[turn.status] += 1
            if turn.status != "completed":
                errors.append(f"send {index}: {turn.status}: {turn.error}")
            if turn.status == "failed" and "did not finish in time" in turn.error:
                statuses["waitTimedOut"] += 1
        except Exception as error:  # noqa: BLE001 — the engine ended the turn failed; count it, go on
            statuses["raised"] += 1
            errors.append(f"send {index} raised {type(error).__name__}: {str(error).strip()[:200]}")
        samples.append(time.perf_counter() - t0)
        sent.append(content)
        if index % 100 == 0:
            waited = agent.turns.filter(compaction_wait_ms__gt=0).count()
            log(f"{index:>4} sends in {time.perf_counter() - began:6.1f} s; {waited} waited")
    total_seconds = time.perf_counter() - began

    deadline = time.monotonic() + LIVE_COMPACTION_WAIT_SECONDS
    while agent.compactions.filter(status__in=["queued", "running"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    agent.refresh_from_db()
    result = {"sends": benchlib.percentiles(samples) | {"count": len(samples), "planned": len(messages)}}
    result["sends"].update(
        failed=len(samples) - statuses["completed"], errors=errors[:50], totalSeconds=round(total_seconds, 2)
    )
    result["sends"].update(raised=statuses["raised"], waitTimedOut=statuses["waitTimedOut"])
    result["waits"] = waits(agent, samples)
    result["compactions"], result["checkpoints"] = compactions(agent), checkpoints(agent)
    result["context"] = {
        "finalTokens": context_assemble(agent).total_tokens,
        "maxTokens": agent.max_tokens,
        "maxModelInputTokens": max(inputs),
        "modelCalls": len(inputs),
        "callsOverMaxTokens": sum(t > agent.max_tokens for t in inputs),
    }
    result["history"] = history_check(agent, sent)
    result["ledger"] = ledger_check(agent)
    result["memories"] = memories_check(agent, sent, result["history"]["throughBlock"])
    result["problems"] = problems(result)
    return result


def waits(agent, samples: list[float]) -> dict:
    """The timed sends (block 2 on) whose turn waited on a compaction."""
    rows = dict(agent.turns.filter(block_number__gt=1).values_list("block_number", "compaction_wait_ms"))
    waited = [number for number, ms in rows.items() if ms > 0]
    latency = {number: samples[number - 2] for number in rows if number - 2 < len(samples)}
    return {
        "count": len(waited),
        "share": len(waited) / len(rows) if rows else 0.0,
        "percent": 100 * len(waited) / len(rows) if rows else 0.0,
        **benchlib.percentiles([rows[n] / 1000 for n in waited]),
        "sendWhenWaiting": benchlib.percentiles([latency[n] for n in waited if n in latency]),
        "sendWhenNotWaiting": benchlib.percentiles([s for n, s in latency.items() if rows[n] == 0]),
    }


def compactions(agent) -> dict:
    every = list(agent.compactions.all())
    done = [c for c in every if c.status == "done" and c.started_at and c.finished_at]
    statuses, reasons = Counter(c.status for c in every), Counter(c.reason for c in every)
    return {
        "count": len(every),
        **{key: statuses[key] for key in ("done", "failed", "queued", "running")},
        **{key: reasons[key] for key in ("threshold", "forced")},
        "doneWithoutCheckpoint": sum(c.checkpoint_id is None for c in done),
        "retried": sum(c.attempts > 1 for c in every),
        "errors": sorted({c.error for c in every if c.error})[:10],
        "run": benchlib.percentiles([(c.finished_at - c.started_at).total_seconds() for c in done]),
        "queueToDone": benchlib.percentiles([(c.finished_at - c.created_at).total_seconds() for c in done]),
        "queueToStart": benchlib.percentiles([(c.started_at - c.created_at).total_seconds() for c in done]),
    }


def checkpoints(agent) -> dict:
    every = list(agent.checkpoints.order_by("id"))
    kinds = Counter(c.kind for c in every)
    return {
        "count": len(every),
        "compaction": kinds["compaction"],
        "forced": kinds["forced"],
        "finalBlockTokens": every[-1].block_tokens if every else 0,
        "maxBlockTokens": max((c.block_tokens for c in every), default=0),
        "finalSummaryLines": len((every[-1].summary or "").splitlines()) if every else 0,
    }


def history_check(agent, sent: list[str]) -> dict:
    """Every block 1..N is there, in order, holding the message that was
    sent; the folded ones are exactly those the checkpoint in force covers."""
    from agents.sending.context import current_checkpoint

    blocks = list(agent.blocks.order_by("number").values_list("number", "entries", "folded"))
    checkpoint = current_checkpoint(agent)
    through = checkpoint.through_block if checkpoint else 0
    first = {n: entries[0] if entries else {} for n, entries, _ in blocks}
    wrong = [
        n
        for n, m in first.items()
        if n > len(sent) or (m.get("role"), m.get("content")) != ("user", sent[n - 1])
    ]
    misfolded = [n for n, _, folded in blocks if folded != (n <= through)]
    contiguous = (
        [n for n, *_ in blocks] == list(range(1, len(sent) + 1)) == list(range(1, agent.last_block + 1))
    )
    folded = sum(f for *_, f in blocks)
    return {
        "intact": contiguous and not wrong and not misfolded,
        "lastBlock": agent.last_block,
        "wrongMessage": wrong[:20],
        "misfolded": misfolded[:20],
        "throughBlock": through,
        "folded": folded,
        "verbatim": len(blocks) - folded,
    }


def ledger_check(agent) -> dict:
    """One compaction cost line per compaction that called the model: the
    done ones whose checkpoint moved the fold forward (one that folds
    nothing new carries the summary over, with no call)."""
    from billing.models import CostLine

    costs = CostLine.objects.filter(game_id=agent.game_id)
    lines = list(costs.filter(kind="compaction").values_list("compaction_id", "quantity"))
    advanced, last = set(), 0
    for checkpoint_id, through in agent.checkpoints.order_by("id").values_list("id", "through_block"):
        if through > last:
            advanced.add(checkpoint_id)
        last = through
    with_call = {str(c.uuid) for c in agent.compactions.filter(status="done") if c.checkpoint_id in advanced}
    ids = [str(cid) for cid, _ in lines]
    return {
        "ok": len(ids) == len(set(ids)) and set(ids) == with_call,
        "compactionLines": len(lines),
        "compactionsWithModelCall": len(with_call),
        "compactionTokens": sum(q for _, q in lines),
        "modelTokens": sum(costs.filter(kind="model").values_list("quantity", flat=True)),
    }


def memories_check(agent, sent: list[str], through: int) -> dict:
    """What the compactor did to `quest`, and whether `quest` holds the last
    `@memory quest:` line folded."""
    from memories.models import Memory, MemoryEvent

    events = MemoryEvent.objects.filter(agent=agent, by="compactor")
    dropped = Counter(events.filter(change="dropped").values_list("note", flat=True))
    folded = [
        line[15:] for text in sent[:through] for line in text.splitlines() if line[:15] == "@memory quest: "
    ]
    quest = Memory.objects.get(agent=agent, name="quest")
    return {
        "compactorUpdated": events.filter(change="updated").count(),
        "compactorDropped": sum(dropped.values()),
        "droppedReasons": dict(dropped),
        "questHoldsLastFoldedLine": bool(folded) and quest.content == folded[-1],
    }


def problems(result: dict) -> list[str]:
    sends, compactions, live = result["sends"], result["compactions"], result["compactions"]["queued"]
    checks = {
        f"stopped early after {sends['count']} of {sends['planned']} sends": sends["count"]
        < sends["planned"],
        f"{sends['failed']} sends did not complete: {sends['errors'][:3]}": sends["failed"],
        f"history is not intact: {result['history']}": not result["history"]["intact"],
        f"the ledger does not match the compactions: {result['ledger']}": not result["ledger"]["ok"],
        f"{compactions['failed']} compactions failed: {compactions['errors']}": compactions["failed"],
        f"{live + compactions['running']} compactions still live at the end": live + compactions["running"],
    }
    return [problem for problem, found in checks.items() if found]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
