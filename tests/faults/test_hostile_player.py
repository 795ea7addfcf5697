"""Hostile players beside a quiet game, on the production setup: two Daphne
processes with connection pools, PostgreSQL, Redis, a Celery worker for
compactions, DEBUG off, and a loopback model that says whatever the players
steer it to (tests/support/hostile_model.py): hundreds of tool calls in one
step, arguments nested 2,000 deep, arguments at the studio's bound and past
it, a stream that stops being JSON, a completion with no choices, and
compactor answers nested deep or not JSON.

Ten agents of one game play it — every attack at once with credits to
spare, each ending as its bound says; then rounds of sends on a small
balance that runs out — while another game's agent is sent plain messages.
Afterwards: no answer was a 5xx; every quiet send completed; every hostile
send was refused with its code or ran a turn that ended completed (maybe
cut short) or failed with a code that says why; no balance was below zero
at any moment (sampled throughout); checkledger is satisfied; every token
the model billed was charged exactly once, per game; and what the studio
wrote stayed in proportion: PostgreSQL's WAL per hostile turn, each agent's
event buffer in Redis, each answer's size, all under bounds made from the
settings.

Timings are bench/hostile_player.py's figures, not this test's:
`STUDIO_BENCH_FIGURES` names a file to write them to (and adds a phase with
each attack played alone, measured one by one), `STUDIO_BENCH_ROUNDS` and
`STUDIO_BENCH_TURNS` make the run longer, `STUDIO_BENCH_QUIET_SENDS` the
quiet game's calm rounds."""

import json
import os
import threading
import time
from collections import Counter
from contextlib import ExitStack, suppress
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from agents.models import LIVE_STATUSES, Agent, Compaction, CompactionStatus, Turn, TurnStatus
from agents.services import AgentDefinition, agent_define
from billing import ledger
from billing.models import Account, CostLine, ModelPrice
from studio.live.events import agent_events_head
from studio.runtime.redisconn import redis_client
from studio.services import game_create
from tests.support.api import call_api
from tests.support.hostile_model import HostileModel
from tests.support.web import start_web, stop_web
from tests.support.worker import Worker

from ..conftest import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the production setup: PostgreSQL with a pool"
    ),
]

MODEL = "openai:gpt-hostile"
MARKER = "[hostile]"  # in the hostile agents' system prompt: how the model tells the games apart
PLAYERS = [f"p{n}" for n in range(10)]
# Each player's attacks, in turn. A turn may leave a block bigger than the
# agent's whole context (deep and huge arguments do): the send after it
# fails `context_too_large` while the compaction it waited for folds that
# block — so what follows those two is a plain message.
ATTACKS = [
    "open-flood",
    "huge-arguments",
    "plain",
    "close-flood",
    "deep-arguments",
    "plain",
    "broken-stream",
    "no-choices",
    "oversize-arguments",
]
# bench/hostile_player.py: where the figures go, and a longer run.
FIGURES = os.environ.get("STUDIO_BENCH_FIGURES")
# Rounds of quiet sends, alternating the hostile players off and on; in an
# "on" round each player makes TURNS_A_ROUND sends, on a balance set to
# ROUND_CREDITS (a few turns' worth among ten players: it runs out).
ROUNDS = int(os.environ.get("STUDIO_BENCH_ROUNDS", "1"))
TURNS_A_ROUND = int(os.environ.get("STUDIO_BENCH_TURNS", "4"))
ROUND_CREDITS = Decimal("0.3")
# How each attack's turn ends when the game has credits to spare: the bounds
# of docs/api.md, "What a model returns is bounded".
BOUNDED_BY = {
    "open-flood": "completed too_many_tool_calls",
    "close-flood": "completed too_many_tool_calls",
    "deep-arguments": "completed too_many_steps",
    "huge-arguments": "completed",
    "oversize-arguments": "completed",
    "broken-stream": "failed model_output_invalid",
    "no-choices": "failed model_output_invalid",
    "plain": "completed",
}
QUIET_SENDS_A_ROUND = int(os.environ.get("STUDIO_BENCH_QUIET_SENDS", "8"))
QUIET_PAUSE_SECONDS = 0.05
QUIET_PROCESS = bool(os.environ.get("STUDIO_BENCH_QUIET_PROCESS"))
EVENT_BUFFER_BYTES = 64 * 1024  # its least: the busiest agents' buffers reach it
# How a hostile turn may end.
CUT_SHORT = {"too_many_steps", "too_many_tool_calls", "budget_exhausted"}
FAILED = CUT_SHORT | {
    "model_output_invalid",
    # A send whose context would pass maxTokens waits for a compaction; the
    # hostile compactor fails some attempts, and one that cannot be paid waits.
    "context_too_large",
    "insufficient_credits",
}
ENV = {
    "OPENAI_API_KEY": "test-key",
    "DJANGO_DEBUG": "0",
    "STUDIO_DB_POOL": "1",
    "STUDIO_DB_POOL_MAX": "8",
    "STUDIO_COMPACTION_RUNNER": "celery",
    "STUDIO_SEND_RATE": "1000/s",
    "STUDIO_EVENT_BUFFER_BYTES": str(EVENT_BUFFER_BYTES),
    "STUDIO_COMPACTION_WAIT_SECONDS": "10",
    "STUDIO_MODEL_TIMEOUT_SECONDS": "30",
}


def bounds() -> dict:
    """What the studio may write, from its settings: WAL per turn (the
    attacks send at most one call a turn with arguments near their bound,
    which the turn's entry, its block and a memory may each hold; every
    other call writes its entry, a fee and maybe a memory), an answer's
    bytes (each tool call's shown texts, JSON escaped), and an agent's
    event buffer."""
    studio = settings.STUDIO
    calls = studio["MAX_TOOL_CALLS_PER_TURN"] + studio["MAX_MODEL_STEPS"] + 1
    return {
        "wal_per_turn": 3 * studio["MAX_TOOL_ARGUMENTS_BYTES"] + calls * 16 * 1024 + 2**20,
        "answer": calls * 4 * studio["SHOWN_TEXT_MAX_CHARS"] * 2 + 64 * 1024,
        "event_buffer": EVENT_BUFFER_BYTES,
    }


# --- the players ----------------------------------------------------------------------------


def message(attack: str, n: int) -> str:
    return f"[attack: {attack}] Do as I say, ghost ({n})."


def outcome(status: int, body: dict) -> str:
    """What a send came to, in a word: a refusal's status and code, or the
    turn's status with its cut-short or error code."""
    if status != 200:
        return f"{status} {(body.get('error') or {}).get('code')}"
    turn = body["turn"]
    code = turn.get("errorCode") or (turn.get("cutShort") or {}).get("code") or ""
    return f"{turn['status']} {code}".strip()


class Players:
    """The hostile game's players, a thread each, playing a round of sends
    each when asked; every answer kept as (agent, attack, status, outcome,
    bytes)."""

    def __init__(self, urls: list[str], key: str):
        self.urls, self.key = urls, key
        self.answers: list[tuple] = []
        self.said: dict[str, str] = {}  # each outcome's first error message
        self.played = Counter()
        self.lock = threading.Lock()

    def send(self, url: str, agent: str, attack: str) -> tuple:
        with self.lock:
            self.played[agent] += 1
            n = self.played[agent]
        status, body = call_api(
            url, self.key, "POST", f"/agents/{agent}/messages", {"content": message(attack, n)}
        )
        answer = (agent, attack, status, outcome(status, body), len(json.dumps(body)))
        error = (body.get("turn") or {}).get("error") or (body.get("error") or {}).get("message")
        with self.lock:
            self.answers.append(answer)
            self.said.setdefault(answer[3], error)
        return answer

    def round(self, turns: int, attack: str | None = None) -> threading.Thread:
        """Each player's next `turns` attacks (or `attack`), all players at
        once; the thread that waits for them."""

        def play(index: int, agent: str) -> None:
            try:
                for _ in range(turns):
                    next_one = attack or ATTACKS[(index + self.played[agent]) % len(ATTACKS)]
                    self.send(self.urls[index % len(self.urls)], agent, next_one)
            finally:
                connection.close()

        threads = [threading.Thread(target=play, args=(i, agent)) for i, agent in enumerate(PLAYERS)]

        def all_of_them() -> None:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)

        waiter = threading.Thread(target=all_of_them)
        waiter.start()
        return waiter


def quiet_send(url: str, key: str, answers: list) -> float:
    """One of the quiet game's sends (after a pause, as a game's players
    make them): its seconds."""
    time.sleep(QUIET_PAUSE_SECONDS)
    started = time.perf_counter()
    status, body = call_api(url, key, "POST", "/agents/innkeeper/messages", {"content": "Ale, please."})
    took = time.perf_counter() - started
    answers.append((status, outcome(status, body)))
    return took


# --- what is watched while it runs ----------------------------------------------------------


class Sampler:
    """Every game's balance, read over and over in a thread of its own while
    the run goes on: the lowest seen, per game."""

    def __init__(self):
        self.lowest: dict[str, Decimal] = {}
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Sampler":
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)

    def _run(self) -> None:
        try:
            while not self.stop.wait(0.01):
                for slug, balance in Account.objects.values_list("game__slug", "balance"):
                    self.lowest[slug] = min(balance, self.lowest.get(slug, balance))
                self.samples += 1
        finally:
            connection.close()


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds process `pid` has used; without one, the busy seconds
    (not idle, not waiting on I/O) of every core since boot."""
    if pid is not None:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


class Cpu:
    """CPU used while the hostile players are off and while they are on:
    by the studio's processes (web, worker), the model's, and the machine."""

    def __init__(self, pids: dict[str, list[int]]):
        self.pids = pids
        self.used: dict[str, Counter] = {"off": Counter(), "on": Counter()}
        self.mark()

    def _read(self) -> Counter:
        read = Counter({name: sum(map(cpu_seconds, pids)) for name, pids in self.pids.items()})
        read["machine"], read["wall"] = cpu_seconds(), time.monotonic()
        return read

    def mark(self, label: str | None = None) -> None:
        """What was used since the last mark goes to `label` (off or on)."""
        now = self._read()
        if label:
            self.used[label].update({key: now[key] - self.last[key] for key in now})
        self.last = now


class Phases:
    """How long each part of the run took (for the benchmark's figures)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.last = time.monotonic()

    def end(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name], self.last = round(now - self.last, 1), now


class Wal:
    """PostgreSQL's WAL from the moment this is made: the whole server's
    (other databases' too, an upper bound), and this database's own — the
    records that touch its relations, read with pg_walinspect where it can
    be had (commit records, which name no relation, are left out), else
    None."""

    def __init__(self):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_current_wal_lsn(), oid FROM pg_database WHERE datname = current_database()"
            )
            self.start, database = cursor.fetchone()
        self.ours = f"% rel %/{database}/%"  # a block reference: rel <tablespace>/<database>/<relation>

    def written(self) -> dict:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_flush_lsn()")
            end = cursor.fetchone()[0]
            cursor.execute("SELECT pg_wal_lsn_diff(%s, %s)", [end, self.start])
            written = {"server": int(cursor.fetchone()[0]), "database": None}
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
                cursor.execute(
                    "SELECT coalesce(sum(record_length), 0) FROM pg_get_wal_records_info(%s, %s) "
                    "WHERE block_ref LIKE %s",
                    [self.start, end, self.ours],
                )
                written["database"] = int(cursor.fetchone()[0])
        except DatabaseError:  # no pg_walinspect, no right to it, or the WAL recycled meanwhile
            pass
        return written


class Listener:
    """A WebSocket listener on one agent's events, as game code holds one:
    the size of each event it hears, by seq."""

    def __init__(self, url: str, key: str, agent: str):
        self.socket = ws_connect(
            url.replace("http", "ws") + f"/ws/v1/agents/{agent}/events",
            subprotocols=["studio.v1", f"bearer.{key}"],
            open_timeout=60,
            close_timeout=1,
            ping_interval=None,
            legacy=True,  # held past this method, not in a `with`
        )
        assert json.loads(self.socket.recv(timeout=60))["type"] == "hello"
        self.heard: list[tuple[int, int]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with suppress(ConnectionClosed):
            for raw in self.socket:
                self.heard.append((json.loads(raw).get("seq") or 0, len(raw.encode())))

    def last_seq(self) -> int:
        return max((seq for seq, _ in self.heard), default=0)

    def after(self, seq: int) -> tuple[int, int]:
        """(events, bytes) heard after `seq`."""
        newer = [size for heard, size in self.heard if heard > seq]
        return len(newer), sum(newer)

    def close(self) -> None:
        self.socket.close()
        self.thread.join(5)


def event_buffer(agent: Agent) -> list[bytes]:
    """The agent's event buffer in Redis, oldest first: each event's JSON."""
    return redis_client().lrange(f"{settings.CHANNEL_PREFIX}:events:{agent.pk}", 0, -1)


def event_buffer_memory(agent: Agent) -> int:
    """What Redis says the agent's event buffer takes (MEMORY USAGE)."""
    return redis_client().memory_usage(f"{settings.CHANNEL_PREFIX}:events:{agent.pk}") or 0


def compactions_idle() -> bool:
    """No compaction running or due to run (one that waits for credits waits
    for good, holding nothing)."""
    live = [CompactionStatus.QUEUED, CompactionStatus.RUNNING]
    return not Compaction.objects.filter(status__in=live, awaits_credits=False).exists()


def quiescent(timeout: float = 60) -> None:
    wait_for(lambda: not Turn.objects.filter(status__in=LIVE_STATUSES).exists(), timeout=timeout)
    wait_for(compactions_idle, timeout=timeout)


def balance_set(game, to: Decimal) -> None:
    """An operator's adjustment bringing the game's balance to `to`."""
    change = to - ledger.balance(game)
    if change:
        ledger.adjustment_post(game=game, amount=change, reason="A round's credits", made_by="test")


# --- the money --------------------------------------------------------------------------------


def billed(stats: dict) -> dict:
    """Per game: the calls the model billed and their tokens."""
    return {
        game: {"calls": b["calls"], "tokens": b["prompt_tokens"] + b["completion_tokens"]}
        for game, b in stats["billed"].items()
    }


def charged(games: dict) -> dict:
    """Per game: the model calls its Model and Compaction lines charged, and their tokens."""
    out = {}
    for label, game in games.items():
        lines = CostLine.objects.filter(game=game, kind__in=["model", "compaction"])
        out[label] = {
            "calls": sum(line.detail["calls"] for line in lines),
            "tokens": sum(line.quantity for line in lines),
        }
    return out


# --- the run ------------------------------------------------------------------------------------


def solo(urls: list[str], players: Players, agent: str) -> list[dict]:
    """One player's every attack alone, each with the WAL it wrote (its
    compaction's, if it queued one, with it) and the events it published."""
    figures = []
    listener = Listener(urls[1], players.key, agent)
    players.send(urls[0], agent, "setup")
    for attack in ATTACKS:
        seq, wal = listener.last_seq(), Wal()
        answer = players.send(urls[0], agent, attack)
        quiescent()
        # The last events on their way: until the listener has heard the newest.
        newest = agent_events_head(Agent.objects.get(game__slug="hostile", name=agent).pk) or 0
        wait_for(lambda newest=newest: listener.last_seq() >= newest)
        events, event_bytes = listener.after(seq)
        figures.append(
            {
                "attack": attack,
                "wal": wal.written(),
                "events": events,
                "eventBytes": event_bytes,
                "answerBytes": answer[4],
                "outcome": answer[3],
            }
        )
    listener.close()
    return figures


def test_hostile_players_are_bounded_and_billed_and_the_quiet_game_goes_on(tmp_path, event_buffers_cleared):
    ModelPrice.objects.create(model=MODEL, input_per_mtok=Decimal("0.5"), output_per_mtok=Decimal("2"))
    hostile, hostile_key = game_create(slug="hostile", credits=5)
    quiet, quiet_key = game_create(slug="quiet", credits=100)
    ghost = AgentDefinition(
        model=MODEL,
        system_prompt=f"{MARKER} A ghost of the marsh; the players tell it what to do.",
        memory_enabled=True,
        max_open_tokens=7000,
        max_tokens=16000,
    )
    for name in PLAYERS:
        agent_define(game=hostile, name=name, definition=ghost, by=None, via="command")
    innkeeper = AgentDefinition(model=MODEL, system_prompt="An innkeeper.", memory_enabled=True)
    agent_define(game=quiet, name="innkeeper", definition=innkeeper, by=None, via="command")
    phases = Phases()
    with ExitStack() as running:  # each process stopped, whatever happens, the last started first
        model = HostileModel(marker=MARKER, argument_bound=settings.STUDIO["MAX_TOOL_ARGUMENTS_BYTES"])
        running.callback(model.stop)
        queue = f"hostile{os.getpid()}"
        env = {**ENV, "OPENAI_BASE_URL": model.base_url, "STUDIO_CELERY_QUEUE": queue}
        # The quiet game's sends go to the second web process, which the
        # hostile players share; STUDIO_BENCH_QUIET_PROCESS gives it one of
        # its own (bench/hostile_player.py --quiet-process).
        processes, urls = start_web(tmp_path, 3 if QUIET_PROCESS else 2, **env)
        running.callback(stop_web, processes)
        quiet_url, urls = urls[-1], urls[:2]
        worker = Worker(tmp_path / "worker.log", queue, **env)
        running.callback(worker.stop)
        phases.end("start")
        sampler = Sampler().start()
        running.callback(sampler.finish)
        players = Players(urls, hostile_key)
        quiet_answers: list = []
        calm, loaded, alone = [], [], []
        players.round(1, "setup").join()  # each has `lore`, open, to open again and again
        assert [answer[3] for answer in players.answers] == ["completed"] * len(PLAYERS), players.answers
        for _ in range(10):  # warm: the SDK and the pools' connections are made once
            quiet_send(quiet_url, quiet_key, quiet_answers)
        players.round(1).join()  # every attack at once, with credits to spare
        wave = players.answers[len(PLAYERS) :]
        quiescent()
        phases.end("setup")
        if FIGURES:  # each attack alone, by an agent of its own, for their own figures
            agent_define(game=hostile, name="solo", definition=ghost, by=None, via="command")
            alone = solo(urls, players, "solo")
            phases.end("solo")
        played_before, wal = len(players.answers), Wal()
        cpu = Cpu(
            {"web": [p.pid for p in processes], "worker": [worker.process.pid], "model": [model.process.pid]}
        )
        for _ in range(ROUNDS):
            calm += [quiet_send(quiet_url, quiet_key, quiet_answers) for _ in range(QUIET_SENDS_A_ROUND)]
            balance_set(hostile, ROUND_CREDITS)
            cpu.mark("off")
            round_ = players.round(TURNS_A_ROUND)
            while round_.is_alive():
                loaded.append(quiet_send(quiet_url, quiet_key, quiet_answers))
            round_.join()
            quiescent()  # what the round queued (compactions) done before the next calm round
            cpu.mark("on")
        written = wal.written()
        phases.end("rounds")
        stats = model.stats()

    hostile_answers = players.answers
    ran = [a for a in hostile_answers[played_before:] if a[2] == 200]
    limits = bounds()
    buffers = {agent.name: event_buffer(agent) for agent in Agent.objects.filter(game=hostile)}
    buffer_bytes = {name: sum(map(len, items)) for name, items in buffers.items()}
    buffer_memory = {agent.name: event_buffer_memory(agent) for agent in Agent.objects.filter(game=hostile)}
    biggest_event = max((len(item) for items in buffers.values() for item in items), default=0)
    games = {"hostile": hostile, "quiet": quiet}
    checkledger = StringIO()
    figures = {
        "calm": calm,
        "loaded": loaded,
        "solo": alone,
        "walPerTurn": {where: size and size / max(len(ran), 1) for where, size in written.items()},
        "hostileTurns": len(ran),
        "hostileOutcomes": Counter(a[3] for a in hostile_answers),
        "hostileErrors": players.said,
        "largestAnswer": max(a[4] for a in hostile_answers),
        "eventBufferBytes": buffer_bytes,
        "eventBufferMemory": buffer_memory,
        "eventBufferBound": EVENT_BUFFER_BYTES,
        "largestEvent": biggest_event,
        "lowestBalance": {slug: str(balance) for slug, balance in sampler.lowest.items()},
        "balanceSamples": sampler.samples,
        "serverErrors": sum(1 for a in hostile_answers if a[2] >= 500)
        + sum(1 for status, _ in quiet_answers if status >= 500),
        "billed": billed(stats),
        "charged": charged(games),
        "modelAnswers": stats["kinds"],
        "bounds": limits,
        "seconds": phases.seconds,
        "cpu": cpu.used,
    }
    try:
        call_command("checkledger", stdout=checkledger)
    finally:
        figures["checkledger"] = checkledger.getvalue()
        if FIGURES:
            Path(FIGURES).write_text(json.dumps(figures, default=str, indent=2))

    # No server error, for either game; every quiet send completed.
    assert not [a for a in hostile_answers if a[2] >= 500], Counter(a[3] for a in hostile_answers)
    assert quiet_answers and all(answer == (200, "completed") for answer in quiet_answers), Counter(
        quiet_answers
    )
    # Every hostile send was refused for a reason (402, 429) or ran a turn
    # that ended completed (maybe cut short) or failed saying why.
    for agent, attack, status, said, _ in hostile_answers:
        state, _, code = said.partition(" ")
        if status in (402, 429):
            assert code != "None", (agent, attack, said)
        elif state == "completed":
            assert status == 200 and (not code or code in CUT_SHORT), (agent, attack, said)
        else:
            assert status == 200 and state == "failed" and code in FAILED, (agent, attack, said)
    assert not Turn.objects.filter(status__in=LIVE_STATUSES).exists()
    ended = Turn.objects.filter(agent__game=hostile)
    assert set(ended.values_list("status", flat=True)) <= {TurnStatus.COMPLETED, TurnStatus.FAILED}
    assert set(ended.filter(status=TurnStatus.FAILED).values_list("error_code", flat=True)) <= FAILED
    assert not ended.filter(open_call_tokens__isnull=False).exists()
    # The players did what they were steered to, and the bounds answered it.
    outcomes = Counter(a[3] for a in hostile_answers)
    assert {(attack, said) for _, attack, _, said, _ in wave} == set(BOUNDED_BY.items()), wave
    assert any("budget_exhausted" in said for said in outcomes), outcomes  # the credits ran out
    # Money: never below zero, the ledger exact, every billed token charged once.
    assert sampler.samples > 10 and all(balance >= 0 for balance in sampler.lowest.values()), sampler.lowest
    assert all(balance >= 0 for balance in Account.objects.values_list("balance", flat=True))
    assert all(check.is_consistent for check in ledger.ledger_check()), ledger.ledger_check()
    assert stats["unsent"] == 0, stats
    assert figures["charged"] == figures["billed"], (figures["charged"], figures["billed"], stats["kinds"])
    # Writes in proportion to what happened.
    per_turn = figures["walPerTurn"]  # this database's, where it can be told apart from the server's
    assert (per_turn["server"] if per_turn["database"] is None else per_turn["database"]) < limits[
        "wal_per_turn"
    ], per_turn
    assert figures["largestAnswer"] < limits["answer"], figures["largestAnswer"]
    for name, size in buffer_bytes.items():
        assert size <= EVENT_BUFFER_BYTES + biggest_event, (name, size)
    assert max(buffer_bytes.values()) > EVENT_BUFFER_BYTES // 2, buffer_bytes  # (the bound was put to work)
