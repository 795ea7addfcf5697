"""A fault run under load: two web processes (Daphne, each with a connection
pool), a Celery worker, four games of four agents each, sixteen clients
sending, reading, cancelling and compacting at once — while the compaction
worker is killed mid-run and Redis is restarted.

At the end: the ledger checks out (balance and holds), no turn is left
live, every request got an answer that is a success or a refusal with its
code, and none was a 5xx."""

import os
import random
import threading
import time
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from agents.models import LIVE_STATUSES, Compaction, Turn
from agents.sending.turn_slot import turns_reap
from agents.services import AgentDefinition, agent_define
from bench.launcher import free_port
from billing import ledger
from billing.models import Account
from studio.services import game_create
from tests.support.api import call_api
from tests.support.redis_server import Redis
from tests.support.web import start_web, stop_web
from tests.support.worker import Worker

from ..conftest import call, script, wait_for

ROOT = Path(__file__).resolve().parents[2]
# FAULT_RUN_SECONDS=60 for a longer run by hand.
LOAD_SECONDS = float(os.environ.get("FAULT_RUN_SECONDS", "8"))
# The clients go on past LOAD_SECONDS until they have had this many answers
# between them: a loaded machine answers fewer in the same seconds.
AT_LEAST_ANSWERS = 100

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the production setup: PostgreSQL with a pool"
    ),
]


def a_message(rng: random.Random, n: int) -> str:
    """What a client sends: memory writes and deletes, slow turns, failing
    calls, lines that make the next compaction slow, or plain talk."""
    name = rng.choice(["quest", "npcs", "world"])
    return rng.choice(
        [
            script(
                call("close_memory", name=name, description="notes", content=f"note {n} " * 20), {"say": "ok"}
            ),
            script(call("open_memory", name=name), call("delete_memory", name=name), {"say": "gone"}),
            script(call("open_memory", name=name), {"sleep": rng.uniform(0.2, 0.8)}, {"say": "slow"}),
            script(call("open_memory", name=name), {"fail": "the model is down"}),
            f"@compactor-sleep 1\n@memory {name}: rewritten {n}\n" + "the bells ring over the marsh " * 30,
            f"message {n}: " + "the ferryman waits " * rng.randint(5, 60),
        ]
    )


def cancel_one(url: str, key: str, agent: str, answers: list, after: float) -> None:
    """Cancel one of the agent's live turns, queued ones first (a cancel can
    race the start of the turn it cancels)."""
    time.sleep(after)
    status, body = call_api(url, key, "GET", f"/agents/{agent}/turns?limit=10")
    answers.append((status, body))
    live = sorted(
        (t for t in body.get("turns", []) if t["status"] in ("queued", "running")), key=lambda t: t["status"]
    )
    if live:
        answers.append(call_api(url, key, "POST", f"/agents/{agent}/turns/{live[0]['id']}/cancel"))


def client(url: str, key: str, agents: list[str], seed: int, until: float, answers: list) -> None:
    rng = random.Random(seed)
    n = 0
    while time.monotonic() < until or len(answers) <= AT_LEAST_ANSWERS:
        n += 1
        agent = rng.choice(agents)
        roll = rng.random()
        if roll < 0.45:
            headers = {"Idempotency-Key": f"{seed}-{n}"} if rng.random() < 0.3 else None
            body = {"content": a_message(rng, n), "transient": rng.random() < 0.1}
            answers.append(call_api(url, key, "POST", f"/agents/{agent}/messages", body, headers))
            if headers and rng.random() < 0.5:  # a retry of the same message
                answers.append(call_api(url, key, "POST", f"/agents/{agent}/messages", body, headers))
        elif roll < 0.55:  # a burst at one agent: some queue (one is cancelled), some may find the queue full
            bodies = [{"content": a_message(rng, n)} for _ in range(5)]
            path = f"/agents/{agent}/messages"
            burst = [
                threading.Thread(target=lambda b=b, p=path: answers.append(call_api(url, key, "POST", p, b)))
                for b in bodies
            ]
            burst.append(
                threading.Thread(target=cancel_one, args=(url, key, agent, answers, rng.uniform(0, 0.3)))
            )
            for thread in burst:
                thread.start()
            for thread in burst:
                thread.join(90)
        elif roll < 0.65:
            cancel_one(url, key, agent, answers, 0)
        elif roll < 0.72:
            answers.append(call_api(url, key, "POST", f"/agents/{agent}/compact"))
        else:
            path = rng.choice(
                ["", "/history", "/memories", "/context", "/checkpoint", "/compactions", "/turns"]
            )
            answers.append(call_api(url, key, "GET", f"/agents/{agent}{path}"))
            if rng.random() < 0.2:
                answers.append(call_api(url, key, "GET", "/billing"))


def compactions_hold_nothing(games) -> bool:
    for game in games:
        turns_reap(game_id=game.pk)
    return not Compaction.objects.filter(held__gt=0).exists()


def test_a_minute_of_mixed_traffic_with_a_worker_killed_and_redis_restarted_stays_consistent(tmp_path):
    redis = Redis(free_port(), tmp_path)
    redis.start()
    prefix = f"faultrun{os.getpid()}"
    env = {
        "REDIS_URL": f"redis://127.0.0.1:{redis.port}/0",
        "STUDIO_CHANNEL_PREFIX": prefix,
        "STUDIO_CELERY_QUEUE": prefix,
        "STUDIO_COMPACTION_RUNNER": "celery",
        # A small pool: sixteen clients and their bursts share six connections per process.
        "STUDIO_DB_POOL": "1",
        "STUDIO_DB_POOL_MAX": "6",
        "STUDIO_DB_POOL_TIMEOUT": "2",
        "STUDIO_SEND_RATE": "10000/s",
        "STUDIO_TURN_LEASE_SECONDS": "3",
        "STUDIO_COMPACTION_WAIT_SECONDS": "3",
        "STUDIO_COMPACTION_LEASE_SECONDS": "4",
        "STUDIO_CELERY_VISIBILITY_TIMEOUT": "3",
        "STUDIO_CELERY_RESTORE_INTERVAL": "1",
        "STUDIO_WS_REJOIN_SECONDS": "1",
    }
    games = []
    for g in range(4):
        game, key = game_create(slug=f"game{g}", credits=50)
        names = [f"npc{a}" for a in range(4)]
        for index, name in enumerate(names):
            agent_define(
                game=game,
                name=name,
                definition=AgentDefinition(
                    memory_enabled=True,
                    max_open_tokens=400,
                    max_tokens=2000,
                    compaction_type="sliding-window" if index == 3 else "summarize",
                ),
                by=None,
                via="command",
            )
        games.append((game, key, names))
    processes, urls = start_web(tmp_path, 2, **env)
    worker = Worker(tmp_path / "worker1.log", prefix, **env)
    answers: list = []
    try:
        until = time.monotonic() + LOAD_SECONDS
        clients = [
            threading.Thread(
                target=client, args=(urls[i % 2], games[i % 4][1], games[i % 4][2], i, until, answers)
            )
            for i in range(16)
        ]
        for thread in clients:
            thread.start()
        time.sleep(LOAD_SECONDS * 0.25)
        worker.kill()  # mid-run, likely mid-compaction (some compactions sleep 1 s)
        time.sleep(LOAD_SECONDS * 0.1)
        redis.stop()
        time.sleep(0.5)
        redis.start()
        worker = Worker(tmp_path / "worker2.log", prefix, **env)
        for thread in clients:
            thread.join(120)
        wait_for(lambda: not Turn.objects.filter(status__in=LIVE_STATUSES).exists())
        # A compaction whose worker was killed mid-call keeps its hold until
        # it is handed out again (its task may have died with Redis, too).
        wait_for(lambda: compactions_hold_nothing([game for game, _, _ in games]))
    finally:
        stop_web(processes)
        worker.stop()
        redis.stop()

    statuses = Counter(status for status, _ in answers)
    assert len(answers) > AT_LEAST_ANSWERS, statuses
    assert not [a for a in answers if a[0] >= 500], statuses
    assert set(statuses) <= {200, 202, 402, 404, 409, 413, 422, 429}, statuses
    refusals = [body for status, body in answers if status >= 400]
    assert all(body.get("error", {}).get("code") for body in refusals), refusals[:5]
    assert not Turn.objects.filter(status__in=LIVE_STATUSES).exists()
    assert list(Account.objects.values_list("held", flat=True)) == [0] * 4
    assert all(check.is_consistent for check in ledger.ledger_check()), ledger.ledger_check()
    out = StringIO()
    call_command("checkledger", stdout=out)  # exits non-zero on a mismatch
