"""Compaction under a long conversation: who waits, how long it takes, what is kept.

    .venv/bin/python bench/compaction.py [--config embedded|scale|both] [--sends N] [--latency-ms MS]
                                         [--max-tokens N] [--time-limit S]

For each configuration a fresh child process (this file with `--child`)
sets Django up on a new, empty database, migrates it, and defines one agent
with memory on (`maxOpenTokens` 1000, `maxTokens` 4000 by default). A first send
writes three memories through a script (and leaves `quest` open); then N
sequential sends of ~60–120-token player messages go to it through
`agents.engine.turn_send`, with the `scripted` model delayed by
`STUDIO_SCRIPTED_LATENCY_MS` on every call (chat and compactor), so a
compaction takes about as long as a model call. Some messages carry a line
`@memory quest: …`, which the scripted compactor writes into the open
`quest` memory when it folds that message away.

- embedded: SQLite, no Redis, compactions on the in-process thread runner.
- scale: PostgreSQL, Redis, compactions on a real Celery worker (a
  subprocess, `--pool=solo`) that this child starts and stops.

The parent prints a markdown table and writes bench/results-compaction.json.
See bench/README.md for what is measured and what is left out.
"""

import argparse
import fcntl
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import benchlib  # noqa: E402
from benchlib import script  # noqa: E402

RESULTS_PATH = BENCH_DIR / "results-compaction.json"

# run_all.py points these (and LOCK_PATH) at databases of its own.
SQLITE_PATH = Path("/tmp/studio-bench-compaction.sqlite3")
POSTGRES_DB = "studio_bench_compaction"
# Held by the parent for the whole run: a second run would drop the database
# under the first one.
LOCK_PATH = Path("/tmp/studio-bench-compaction.lock")

CONFIGS = {
    "embedded": {"db": "sqlite", "redis": False, "runner": "thread"},
    "scale": {"db": "postgres", "redis": True, "runner": "celery"},
}

AGENT_NAME = "keeper"
MAX_TOKENS = 4000
MAX_OPEN_TOKENS = 1000
MESSAGE_TOKENS = (60, 120)  # each player message is drawn to land in this range
MEMORY_LINE_EVERY = 10  # every 10th send carries "@memory quest: ..."
TOOL_SEND_EVERY = 50  # every 50th send is a script: open npcs, rewrite it, close it
PROGRESS_EVERY = 100
LIVE_COMPACTION_WAIT_SECONDS = 120  # at the end, for a compaction still running

SYSTEM_PROMPT = (
    "You are the keeper of the Ashmere campaign, the game master for one player, Mara. "
    "Keep the story straight and answer in character. Keep a memory named `quest` open at "
    "all times: what Mara is trying to do right now, and why. Keep `npcs` (everyone she has "
    "met and what they think of her) and `world` (places, factions, rules you have "
    "established) closed; open one when the scene turns to it, write what changed, and "
    "close it again."
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

# What a player says, a sentence at a time; a message is a few of these
# (the first twelve are the server benchmarks' player lines).
SENTENCES = (
    *benchlib.PLAYER_LINES,
    "Mara asks the widow at the tavern whether her sister ever came in here to drink.",
    "I try the silver key in the lock, slowly, ready to pull back if something bites.",
    "I keep my back to the wall and ask the smith what he knows about the bell tower fire.",
    "Let's wait until dusk; I do not want the harbour watch to see us rowing out.",
    "I pour the wine out onto the floor. I don't trust anything the herald gave us.",
    "If the troll wants a toll, I offer it the fiddle instead of our coin and see what it does.",
    "I search the drowned monk's robes for anything that is not ruined by the water.",
    "Mara reads the letter again, slowly, looking for anything Ilsa might have hidden in it.",
    "I tell Oskar I will pay him double on the way back, if he waits for us at the ford.",
    "I climb the tower stairs two at a time and stop at the landing to catch my breath.",
    "Is the raven still following us? I throw it a crust of bread to see if it comes closer.",
    "I ask the monks if anyone has been down to the crypt since the last flood.",
    "We camp under the bridge. I take the first watch and keep the fire small.",
    "I bang on the gate and shout that I have a message for the captain from the abbey.",
    "Mara draws a quick sketch of the symbol on the chapel wall in the back of her journal.",
    "I offer the thief a share of whatever we find if he shows us the way into the cellar.",
    "I tie the rope around the pillar and lower myself into the flooded nave.",
    "What do the townsfolk say about the Lantern Guild when the guild's men are not around?",
    "I pick up the bone whistle from the altar and turn it over in my hands without blowing it.",
    "I remind Aldous that he promised to tell me the truth about the bell if I came back alive.",
    "Mara hums the song her sister used to sing, half hoping something down here answers.",
    "I check the map against the stars to see whether we are still on the north road.",
    "I want to hide the key somewhere safe before we go into town. Somewhere only I would look.",
    "I ask the herald who paid for the new bell, and watch his face while he answers.",
    "When the water starts rising, I grab the candle and run for the stairs.",
    "I step back, raise the iron nail and say that I know what burns the drowned dead.",
)

QUEST_UPDATES = (
    "Find out who paid for the new bell; Brother Aldous is hiding it, and it is tied to Ilsa.",
    "Get the silver key out of Ashmere before the Lantern Guild learns she has it.",
    "Reach Ilsa's sealed house on the mill road at low tide and open it with the silver key.",
    "Learn what the bone whistle summons before anyone else blows it.",
    "Pay Captain Hale's toll and get through the north gate with the key still hidden.",
    "Follow the raven to the crypt under the abbey; Ilsa's song seems to lead there.",
    "Find the thief who sold Ilsa the map and learn who else bought a copy.",
    "Keep Oskar alive until the ferry crossing; he is the only one who knows the tide tables.",
)

NPC_NOTES = (
    "Oskar now trusts her a little after she paid double at the ford.",
    "Brother Aldous admitted the bell was paid for by the Lantern Guild.",
    "Captain Hale let her through but will remember the missing seventh coin.",
    "The widow at the tavern saw Ilsa the night before the flood, with a stranger.",
    "The thief, Wren, now owes Mara a favour and knows the cellar ways.",
    "The herald is afraid of the guild and lied about the wine.",
    "The smith forged the iron nails and suspects what they are for.",
    "The monks fear the crypt more than they fear the flood.",
    "Oskar's daughter runs messages for the guild.",
    "Aldous has a key of his own to the bell tower.",
)


# --- the parent: one child per configuration, then the table ------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=("embedded", "scale", "both"), default="both")
    parser.add_argument("--sends", type=int, default=500, help="sends to the agent (default 500)")
    parser.add_argument(
        "--latency-ms",
        type=int,
        default=200,
        help="delay of every scripted model call, chat and compactor (default 200)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=MAX_TOKENS,
        help=f"the agent's compaction.maxTokens (default {MAX_TOKENS})",
    )
    parser.add_argument(
        "--time-limit",
        type=int,
        default=1800,
        help="seconds of sending per configuration before it stops early (default 1800)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS_PATH)
    parser.add_argument("--child", choices=tuple(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--child-output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sends < 2 or args.latency_ms < 0 or args.max_tokens <= 2 * MAX_OPEN_TOKENS:
        parser.error(
            f"--sends must be at least 2, --latency-ms at least 0, --max-tokens over {2 * MAX_OPEN_TOKENS}"
        )
    if args.child:
        return child_main(args)

    lock = LOCK_PATH.open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"another bench/compaction.py run holds {LOCK_PATH}; try again when it ends", file=sys.stderr)
        return 1
    configs = tuple(CONFIGS) if args.config == "both" else (args.config,)
    started = time.monotonic()
    machine = benchlib.machine_info_brief()  # before the runs: the code they ran is the code checked out now
    runs, failed = benchlib.run_each(configs, lambda config: run_child(config, args))
    if not runs:
        print("no configuration could be measured", file=sys.stderr)
        return 1

    report = {
        "benchmark": "compaction",
        "machine": machine,
        "settings": {
            "sends": args.sends,
            "latencyMs": args.latency_ms,
            "maxTokens": args.max_tokens,
            "maxOpenTokens": MAX_OPEN_TOKENS,
            "messageTokens": list(MESSAGE_TOKENS),
            "memoryLineEvery": MEMORY_LINE_EVERY,
            "toolSendEvery": TOOL_SEND_EVERY,
            "model": "scripted",
            "configs": {name: CONFIGS[name] for name in runs},
        },
        "runs": runs,
        "elapsedSeconds": round(time.monotonic() - started, 1),
    }
    benchlib.write_json(args.output, report)

    print()
    print(markdown_table(runs))
    print()
    print(machine_line(report))
    problems = [f"{name}: {p}" for name, run in runs.items() for p in run["problems"]]
    for problem in problems:
        print(f"PROBLEM {problem}", file=sys.stderr)
    print(f"wrote {benchlib.display_path(args.output)} in {report['elapsedSeconds']} s")
    if failed:
        print(f"FAILED: {', '.join(failed)} (see the output above)", file=sys.stderr)
    return 1 if failed or problems else 0


def run_child(config: str, args) -> dict | None:
    conf = CONFIGS[config]
    print(
        f"== {config}: {args.sends} sends, scripted model latency {args.latency_ms} ms, "
        f"maxTokens {args.max_tokens}, compactions on the {conf['runner']} runner",
        flush=True,
    )
    try:
        url = benchlib.db_recreate(conf["db"], postgres=POSTGRES_DB, sqlite=SQLITE_PATH)
    except Exception as error:  # noqa: BLE001 — report and go on with the other configuration
        print(f"{config}: cannot prepare the database: {error}", file=sys.stderr)
        return None
    # Every STUDIO_* knob at its default, except the ones this benchmark sets.
    env = benchlib.django_env(
        url,
        drop=("STUDIO_",),
        redis=benchlib.REDIS_URL if conf["redis"] else None,
        STUDIO_SCRIPTED_LATENCY_MS=str(args.latency_ms),
        STUDIO_COMPACTION_RUNNER=conf["runner"],
    )
    if conf["runner"] == "celery":
        # A queue of this run's own on the shared Redis: no other worker
        # (a test run's, a dev server's) takes its tasks, and no task left
        # from elsewhere reaches its worker.
        env["STUDIO_CELERY_QUEUE"] = f"bench-compaction-{uuid.uuid4().hex[:8]}"
    return benchlib.run_child(
        __file__,
        ["--child", config, "--sends", str(args.sends), "--latency-ms", str(args.latency_ms)]
        + ["--max-tokens", str(args.max_tokens), "--time-limit", str(args.time_limit)],
        env,
        output_option="--child-output",
        label=config,
        tmp_prefix="studio-bench-compaction-",
    )


def _ms(value) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _pair(p50, p95) -> str:
    return f"{_ms(p50)} / {_ms(p95)}"


def markdown_table(runs: dict) -> str:
    """One column per configuration, one row per figure."""
    names = list(runs)
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, fn) -> None:
        rows.append((label, [fn(runs[name]) for name in names]))

    row("Database · compaction runner", lambda r: f"{r['database']['vendor']} · {r['runner']}")
    row("Sends (failed)", lambda r: f"{r['sends']['count']} ({r['sends']['failed']})")
    row(
        "… failed: raised a DB error / compaction wait timed out",
        lambda r: (
            f"{r['sends']['byStatus'].get('raised', 0)} / "
            f"{r['sends']['byStatus'].get('failed: compaction wait timed out', 0)}"
        ),
    )
    row("Total time s", lambda r: f"{r['sends']['totalSeconds']:.1f}")
    row("Send latency p50 / p95 ms", lambda r: _pair(r["sends"]["p50Ms"], r["sends"]["p95Ms"]))
    row(
        "Sends that waited on a compaction",
        lambda r: f"{r['waits']['count']} ({r['waits']['share'] * 100:.1f}%)",
    )
    row("Wait p50 / p95 ms (of those)", lambda r: _pair(r["waits"]["p50Ms"], r["waits"]["p95Ms"]))
    row(
        "Compactions: done / failed",
        lambda r: (
            f"{r['compactions']['byStatus'].get('done', 0)} / {r['compactions']['byStatus'].get('failed', 0)}"
        ),
    )
    row(
        "… threshold / forced",
        lambda r: (
            f"{r['compactions']['byReason'].get('threshold', 0)} / {r['compactions']['byReason'].get('forced', 0)}"
        ),
    )
    row("… retried (attempts > 1)", lambda r: str(r["compactions"]["retried"]))
    row(
        "Compaction time p50 / p95 ms (started → done)",
        lambda r: _pair(r["compactions"]["runP50Ms"], r["compactions"]["runP95Ms"]),
    )
    row(
        "Queue → done p50 / p95 ms",
        lambda r: _pair(r["compactions"]["queueToDoneP50Ms"], r["compactions"]["queueToDoneP95Ms"]),
    )
    row(
        "Checkpoints written (compaction / forced)",
        lambda r: (
            f"{r['checkpoints']['count']} ({r['checkpoints']['byKind'].get('compaction', 0)} / "
            f"{r['checkpoints']['byKind'].get('forced', 0)})"
        ),
    )
    row(
        "Final context tokens / maxTokens",
        lambda r: f"{r['context']['finalTokens']:,} / {r['context']['maxTokens']:,}",
    )
    row(
        "Largest model input; calls over maxTokens",
        lambda r: f"{r['context']['maxModelInputTokens']:,}; {r['context']['callsOverMaxTokens']}",
    )
    row(
        "Checkpoint block tokens (final / largest)",
        lambda r: f"{r['checkpoints']['finalBlockTokens']:,} / {r['checkpoints']['maxBlockTokens']:,}",
    )
    row(
        "Every block 1..N in history",
        lambda r: f"{'yes' if r['history']['intact'] else 'NO'} (N = {r['history']['lastBlock']})",
    )
    row("Folded / verbatim blocks", lambda r: f"{r['history']['folded']} / {r['history']['verbatim']}")
    row(
        "Compaction cost lines = compactions with a model call",
        lambda r: (
            f"{'yes' if r['ledger']['ok'] else 'NO'} ({r['ledger']['compactionLines']} = "
            f"{r['ledger']['compactionsWithModelCall']})"
        ),
    )
    row(
        "`quest` rewrites by the compactor: applied / dropped",
        lambda r: f"{r['memories']['compactorUpdated']} / {r['memories']['compactorDropped']}",
    )

    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines)


def machine_line(report: dict) -> str:
    versions = ", ".join(
        f"{name} {run['database']['vendor']} {run['database']['version']}"
        for name, run in report["runs"].items()
    )
    return benchlib.machine_brief_line(report["machine"], versions)


# --- the child: one configuration ------------------------------------------------------


def child_main(args) -> int:
    benchlib.django_setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from studio.keys import game_create

    config = args.child

    def log(text: str) -> None:
        benchlib.log(config, text)

    commit = benchlib.git_commit()
    runner = settings.STUDIO["COMPACTION_RUNNER"]
    if runner != CONFIGS[config]["runner"]:
        raise RuntimeError(f"the compaction runner is {runner!r}, not {CONFIGS[config]['runner']!r}")
    started = time.monotonic()
    call_command("migrate", verbosity=0)
    game, _ = game_create(slug=f"bench-compaction-{config}", credits=10**9)
    log(f"migrated in {time.monotonic() - started:.1f} s")

    worker = CeleryWorker(log) if runner == "celery" else None
    try:
        result = run_conversation(game, args, log)
    finally:
        if worker is not None:
            worker.stop()
    if worker is not None:
        result["workerLogErrors"] = worker.errors[:20]
        if worker.errors:
            result["problems"].append(f"the celery worker logged {len(worker.errors)} error lines")
    result.update(
        config=config,
        runner=runner,
        gitCommit=commit,
        database={
            "vendor": connection.vendor,
            "version": benchlib.django_db_version(connection),
            "url": os.environ["DATABASE_URL"],
        },
        redis=bool(settings.REDIS_URL),
        celeryQueue=settings.CELERY_TASK_DEFAULT_QUEUE if runner == "celery" else None,
        settings={key: settings.STUDIO[key] for key in sorted(settings.STUDIO)},
        elapsedSeconds=round(time.monotonic() - started, 1),
    )
    args.child_output.write_text(json.dumps(result, default=str))
    log(f"done in {result['elapsedSeconds']} s")
    return 0


class CeleryWorker:
    """A real worker for the child's database, Redis and queue (the
    `STUDIO_CELERY_QUEUE` the parent chose), started after the queue is
    purged, stopped (warm shutdown) at the end."""

    def __init__(self, log):
        from django.conf import settings

        from studio.celery import app

        self.app, self.log, self.errors = app, log, []
        queue = settings.CELERY_TASK_DEFAULT_QUEUE
        self.name = f"celery@{queue}"
        purged = app.control.purge()
        self.log_file = tempfile.NamedTemporaryFile(
            "w+", prefix="studio-bench-celery-", suffix=".log", delete=False
        )
        began = time.monotonic()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "studio",
                "worker",
                "--pool=solo",
                "-Q",
                queue,
                "-n",
                self.name,
                "-l",
                "warning",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=REPO_ROOT,
            env=dict(os.environ),
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if app.control.ping(destination=[self.name], timeout=0.5):
                log(
                    f"celery worker {self.name} up in {time.monotonic() - began:.1f} s "
                    f"(purged {purged} queued tasks)"
                )
                return
        self.stop()
        raise RuntimeError(f"the Celery worker did not start; its log:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        try:
            return Path(self.log_file.name).read_text()[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # warm shutdown: finishes the task in hand
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log_file.close()
        text = Path(self.log_file.name).read_text(errors="replace")
        # The banner and the warning about running as root are not news.
        self.errors = [
            line for line in text.splitlines() if any(w in line for w in ("ERROR", "CRITICAL", "Traceback"))
        ]
        if self.errors:
            self.log(
                f"the celery worker logged {len(self.errors)} error lines; its log, last lines:\n{self.tail()}"
            )
        Path(self.log_file.name).unlink(missing_ok=True)


# --- the conversation -------------------------------------------------------------------


def call(tool: str, **args) -> dict:
    return {"call": tool, "args": args}


def player_messages(count: int) -> list[str]:
    """`count` player messages of MESSAGE_TOKENS tokens, deterministic;
    every MEMORY_LINE_EVERY-th ends with a line `@memory quest: …`, except
    every TOOL_SEND_EVERY-th, which is a script that rewrites the closed `npcs`
    memory the way an agent does (open, close with new content)."""
    from studio.tokens import count_tokens

    rng = random.Random(4000)
    messages = []
    for index in range(1, count + 1):
        tool_send = index % TOOL_SEND_EVERY == 0
        memory_line = index % MEMORY_LINE_EVERY == 0 and not tool_send
        target = rng.randint(*MESSAGE_TOKENS)
        if memory_line:
            target -= 25  # the @memory line brings it back into range
        sentences: list[str] = []
        while count_tokens(" ".join(sentences)) < target:
            sentences.append(rng.choice(SENTENCES))
        text = " ".join(sentences)
        if memory_line:
            text += f"\n@memory quest: {QUEST_UPDATES[(index // MEMORY_LINE_EVERY) % len(QUEST_UPDATES)]} (as of send {index})"
        if tool_send:
            note = NPC_NOTES[(index // TOOL_SEND_EVERY) % len(NPC_NOTES)]
            content = f"{MEMORIES[1][2]} {note} (as of send {index})"
            text = script(
                call("open_memory", name="npcs"),
                call("close_memory", name="npcs", content=content),
                {"say": text},
            )
        messages.append(text)
    return messages


def setup_message() -> str:
    """Block 1: the agent writes its three memories and opens `quest`."""
    steps = [call("close_memory", name=n, description=d, content=c) for n, d, c in MEMORIES]
    steps.append(call("open_memory", name="quest"))
    steps.append({"say": "The rain has not stopped since you came into Ashmere. Where do you go first?"})
    return script(*steps)


class _ModelInputs:
    """Records the input tokens of every chat call the scripted model gets
    in this process (the compactor's calls go through `summarize`)."""

    def __init__(self):
        from agents.providers.scripted import ScriptedProvider

        self.tokens: list[int] = []
        original = ScriptedProvider.complete
        recorder = self

        def complete(provider, request, control):
            recorder.tokens.append(request.input_tokens)
            return original(provider, request, control)

        ScriptedProvider.complete = complete


def run_conversation(game, args, log) -> dict:
    from agents.context import context_assemble
    from agents.engine import turn_send
    from agents.models import Agent, Compaction, TurnStatus
    from agents.selectors import turn_tool_calls
    from agents.services import AgentDefinition, agent_define

    agent, _ = agent_define(
        game=game,
        name=AGENT_NAME,
        definition=AgentDefinition(
            system_prompt=SYSTEM_PROMPT,
            memory_enabled=True,
            max_open_tokens=MAX_OPEN_TOKENS,
            max_tokens=args.max_tokens,
        ),
    )
    inputs = _ModelInputs()
    sent = [setup_message()]
    turn = turn_send(agent=agent, content=sent[0])
    calls = turn_tool_calls(turn)
    if turn.status != TurnStatus.COMPLETED or len(calls) != 4 or any(c["isError"] for c in calls):
        raise RuntimeError(f"the setup send ended {turn.status} with these tool calls: {calls}")

    messages = player_messages(args.sends)
    samples: list[float] = []
    statuses: Counter = Counter()
    errors: list[str] = []
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    stopped_early = False
    for index, content in enumerate(messages, 1):
        if time.perf_counter() - began > args.time_limit:
            stopped_early = True
            log(f"stopping after {index - 1} sends: past the time limit of {args.time_limit} s")
            break
        t0 = time.perf_counter()
        try:
            turn = turn_send(agent=agent, content=content)
        except Exception as error:  # noqa: BLE001 — the engine ended the turn failed; count it, go on
            samples.append(time.perf_counter() - t0)
            sent.append(content)
            statuses["raised"] += 1
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            errors.append(f"send {index} raised {type(error).__name__}: {first_line}")
            log(errors[-1])
            continue
        samples.append(time.perf_counter() - t0)
        sent.append(content)
        statuses[turn.status] += 1
        if turn.status != TurnStatus.COMPLETED:
            errors.append(f"send {index}: {turn.status}: {turn.error}")
            log(errors[-1])
        if turn.status == TurnStatus.FAILED and "did not finish in time" in turn.error:
            statuses["failed: compaction wait timed out"] += 1
        if index % PROGRESS_EVERY == 0 or index == len(messages):
            agent.refresh_from_db()
            waited = agent.turns.filter(compaction_wait_ms__gt=0).count()
            live = Compaction.objects.filter(agent=agent).values_list("status", flat=True)
            log(
                f"{index:>4} sends in {time.perf_counter() - began:6.1f} s; {waited} waited; "
                f"{len(live)} compactions ({dict(Counter(live))}); context now "
                f"{context_assemble(agent).total_tokens} tokens"
            )
    total_seconds = time.perf_counter() - began
    load_after = os.getloadavg()[0]

    settled = live_compactions_settle(agent, log)
    agent = Agent.objects.get(pk=agent.pk)
    result = {
        "sends": {
            **sends_summary(samples, statuses, errors, total_seconds),
            "planned": len(messages),
            "stoppedEarly": stopped_early,
        },
        "loadAverage": [round(load_before, 2), round(load_after, 2)],
        "liveCompactionSettledSeconds": settled,
    }
    result["waits"] = waits_summary(agent, samples)
    result["compactions"] = compactions_summary(agent)
    result["checkpoints"] = checkpoints_summary(agent)
    result["context"] = {
        "finalTokens": context_assemble(agent).total_tokens,
        "maxTokens": agent.max_tokens,
        "maxModelInputTokens": max(inputs.tokens),
        "modelCalls": len(inputs.tokens),
        "callsOverMaxTokens": sum(1 for t in inputs.tokens if t > agent.max_tokens),
        "modelInputP50Tokens": statistics.median(inputs.tokens),
    }
    result["history"] = history_check(agent, sent)
    result["ledger"] = ledger_check(agent)
    result["memories"] = memories_summary(agent, sent, result["history"]["throughBlock"])
    result["problems"] = problems_of(result)
    return result


def live_compactions_settle(agent, log) -> float:
    """Wait (bounded) for the agent's live compaction, if any, to end."""
    from agents.models import Compaction, CompactionStatus

    began = time.monotonic()
    deadline = began + LIVE_COMPACTION_WAIT_SECONDS
    while Compaction.objects.filter(
        agent=agent, status__in=[CompactionStatus.QUEUED, CompactionStatus.RUNNING]
    ).exists():
        if time.monotonic() >= deadline:
            log(f"a compaction is still live after {LIVE_COMPACTION_WAIT_SECONDS} s; counting anyway")
            break
        time.sleep(0.05)
    return round(time.monotonic() - began, 2)


def quantiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p95": None, "max": None, "mean": None}
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return {
        "p50": round(statistics.median(values), 1),
        "p95": round(cuts[94], 1),
        "max": round(max(values), 1),
        "mean": round(statistics.fmean(values), 1),
    }


def sends_summary(samples, statuses, errors, total_seconds) -> dict:
    q = quantiles([s * 1000 for s in samples])
    return {
        "count": len(samples),
        "failed": len(samples) - statuses.get("completed", 0),
        "byStatus": dict(statuses),
        "errors": errors[:50],
        "totalSeconds": round(total_seconds, 2),
        "p50Ms": q["p50"],
        "p95Ms": q["p95"],
        "maxMs": q["max"],
        "meanMs": q["mean"],
    }


def waits_summary(agent, samples) -> dict:
    """Turns of the timed sends (block 2 on) with compaction_wait_ms > 0."""
    rows = list(
        agent.turns.filter(block_number__gt=1)
        .order_by("block_number")
        .values_list("block_number", "compaction_wait_ms")
    )
    waits = [ms for _, ms in rows if ms > 0]
    waited_blocks = [number for number, ms in rows if ms > 0]
    latency_by_block = {
        number: samples[number - 2] * 1000 for number, _ in rows if 0 <= number - 2 < len(samples)
    }
    q = quantiles([float(ms) for ms in waits])
    plain = quantiles([ms for number, ms in latency_by_block.items() if number not in set(waited_blocks)])
    waited = quantiles([latency_by_block[n] for n in waited_blocks if n in latency_by_block])
    return {
        "count": len(waits),
        "share": len(waits) / len(rows) if rows else 0.0,
        "p50Ms": q["p50"],
        "p95Ms": q["p95"],
        "maxMs": q["max"],
        "totalSeconds": round(sum(waits) / 1000, 2),
        "sendP50MsWhenNotWaiting": plain["p50"],
        "sendP50MsWhenWaiting": waited["p50"],
        "firstWaitedBlocks": waited_blocks[:30],
    }


def compactions_summary(agent) -> dict:
    from agents.models import CompactionStatus

    compactions = list(agent.compactions.order_by("id"))
    done = [c for c in compactions if c.status == CompactionStatus.DONE and c.started_at and c.finished_at]
    run_ms = [(c.finished_at - c.started_at).total_seconds() * 1000 for c in done]
    queue_ms = [(c.finished_at - c.created_at).total_seconds() * 1000 for c in done]
    start_ms = [(c.started_at - c.created_at).total_seconds() * 1000 for c in done]
    run, queue, start = quantiles(run_ms), quantiles(queue_ms), quantiles(start_ms)
    return {
        "count": len(compactions),
        "byStatus": dict(Counter(c.status for c in compactions)),
        "byReason": dict(Counter(c.reason for c in compactions)),
        "doneWithoutCheckpoint": sum(1 for c in done if c.checkpoint_id is None),
        "retried": sum(1 for c in compactions if c.attempts > 1),
        "errors": sorted({c.error for c in compactions if c.error})[:10],
        "runP50Ms": run["p50"],
        "runP95Ms": run["p95"],
        "runMaxMs": run["max"],
        "queueToDoneP50Ms": queue["p50"],
        "queueToDoneP95Ms": queue["p95"],
        "queueToDoneMaxMs": queue["max"],
        "queueToStartP50Ms": start["p50"],
        "queueToStartP95Ms": start["p95"],
    }


def checkpoints_summary(agent) -> dict:
    checkpoints = list(agent.checkpoints.order_by("id"))
    final = checkpoints[-1] if checkpoints else None
    return {
        "count": len(checkpoints),
        "byKind": dict(Counter(c.kind for c in checkpoints)),
        "throughBlocks": [c.through_block for c in checkpoints],
        "finalBlockTokens": final.block_tokens if final else 0,
        "maxBlockTokens": max((c.block_tokens for c in checkpoints), default=0),
        "finalSummaryLines": len((final.summary or "").splitlines()) if final else 0,
    }


def history_check(agent, sent: list[str]) -> dict:
    """Every block 1..N is still there, in order, holding the message that
    was sent; the folded ones are exactly those the checkpoint in force covers."""
    from agents.context import current_checkpoint
    from agents.models import TurnStatus

    blocks = list(agent.blocks.order_by("number").values_list("number", "entries", "folded", "status"))
    numbers = [number for number, *_ in blocks]
    contiguous = numbers == list(range(1, len(sent) + 1)) and agent.last_block == len(sent)
    wrong_content = [
        number
        for number, entries, _, _ in blocks
        if not entries
        or entries[0].get("role") != "user"
        or number > len(sent)
        or entries[0].get("content") != sent[number - 1]
    ]
    unended = [number for number, _, _, status in blocks if status != TurnStatus.COMPLETED]
    checkpoint = current_checkpoint(agent)
    through = checkpoint.through_block if checkpoint else 0
    misfolded = [number for number, _, folded, _ in blocks if folded != (number <= through)]
    folded = sum(1 for *_, f, _ in blocks if f)
    return {
        "intact": contiguous and not wrong_content and not misfolded,
        "lastBlock": agent.last_block,
        "blocks": len(blocks),
        "contiguous": contiguous,
        "blocksWithWrongMessage": wrong_content[:20],
        "blocksNotCompleted": unended[:20],
        "foldedNotMatchingCheckpoint": misfolded[:20],
        "throughBlock": through,
        "folded": folded,
        "verbatim": len(blocks) - folded,
    }


def ledger_check(agent) -> dict:
    """One compaction cost line per compaction that made a model call — the
    done ones whose checkpoint moved the fold forward (under summarize, a
    checkpoint that folds nothing new carries the summary over, no call)."""
    from django.db.models import Sum

    from billing.models import CostKind, CostLine

    lines = list(
        CostLine.objects.filter(game_id=agent.game_id, kind=CostKind.COMPACTION).values_list(
            "compaction_id", "quantity"
        )
    )
    line_ids = [str(cid) for cid, _ in lines]
    checkpoints = list(agent.checkpoints.order_by("id").values_list("id", "through_block"))
    advanced, last = set(), 0
    for checkpoint_id, through in checkpoints:
        if through > last:
            advanced.add(checkpoint_id)
        last = through
    with_call = {
        str(c.uuid)
        for c in agent.compactions.filter(status="done", checkpoint__isnull=False)
        if c.checkpoint_id in advanced
    }
    return {
        "ok": len(line_ids) == len(set(line_ids)) and set(line_ids) == with_call,
        "compactionLines": len(lines),
        "compactionsWithModelCall": len(with_call),
        "duplicateLines": len(line_ids) - len(set(line_ids)),
        "linesWithoutCompaction": len(set(line_ids) - with_call),
        "compactionsWithoutLine": len(with_call - set(line_ids)),
        "compactionTokens": sum(q for _, q in lines),
        "turnsModelLines": CostLine.objects.filter(game_id=agent.game_id, kind=CostKind.MODEL).count(),
        "turnsModelTokens": CostLine.objects.filter(game_id=agent.game_id, kind=CostKind.MODEL).aggregate(
            total=Sum("quantity")
        )["total"]
        or 0,
    }


def memories_summary(agent, sent: list[str], through: int) -> dict:
    """What the compactor did to `quest`, and whether `quest` holds the last
    `@memory quest:` line that has been folded."""
    from memories.models import Change, Memory, MemoryEvent, Writer

    events = Counter(
        MemoryEvent.objects.filter(agent=agent, by=Writer.COMPACTOR).values_list("change", flat=True)
    )
    expected = None
    for number in range(1, through + 1):
        for line in sent[number - 1].splitlines():
            if line.startswith("@memory quest: "):
                expected = line[len("@memory quest: ") :]
    quest = Memory.objects.filter(agent=agent, name="quest").first()
    dropped_notes = Counter(
        MemoryEvent.objects.filter(agent=agent, by=Writer.COMPACTOR, change=Change.DROPPED).values_list(
            "note", flat=True
        )
    )
    return {
        "compactorUpdated": events.get(Change.UPDATED, 0),
        "compactorDropped": events.get(Change.DROPPED, 0),
        "droppedReasons": dict(dropped_notes),
        "questOpen": bool(quest and quest.is_open),
        "questTokens": quest.tokens if quest else 0,
        "questHoldsLastFoldedLine": expected is not None and quest is not None and quest.content == expected,
        "agentWrites": MemoryEvent.objects.filter(agent=agent, by=Writer.AGENT).count(),
    }


def problems_of(result: dict) -> list[str]:
    out = []
    if result["sends"]["stoppedEarly"]:
        out.append(f"stopped early after {result['sends']['count']} of {result['sends']['planned']} sends")
    if result["sends"]["failed"]:
        out.append(f"{result['sends']['failed']} sends did not complete: {result['sends']['errors'][:3]}")
    if not result["history"]["intact"]:
        out.append(f"history is not intact: {result['history']}")
    if not result["ledger"]["ok"]:
        out.append(f"the ledger does not match the compactions: {result['ledger']}")
    failed = result["compactions"]["byStatus"].get("failed", 0)
    if failed:
        out.append(f"{failed} compactions failed: {result['compactions']['errors']}")
    live = sum(result["compactions"]["byStatus"].get(s, 0) for s in ("queued", "running"))
    if live:
        out.append(f"{live} compactions still live at the end")
    return out


if __name__ == "__main__":
    sys.exit(main())
