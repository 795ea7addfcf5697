"""A rolling restart under load, as docs/operating.md's runbook has it: two web
processes, each stopped in turn (SIGTERM: it drains) and started again,
while clients send through a stand-in for the proxy that retries a refused
or broken request on the other process with the same Idempotency-Key —
some waiting for their turns, some answered at once while their turns run
on in the background. No send is lost, none runs twice."""

import json
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter

import pytest
from django.conf import settings

from agents.models import Block, Turn, TurnStatus
from bench.launcher import Daphne
from billing import ledger
from tests.support.web import start_web, stop_web

from ..conftest import script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the production setup: Redis between processes"),
]

CLIENTS, MESSAGES = 6, 20


class Proxy:
    """What nginx does for the runbook's settings: a request that cannot
    connect, or comes back 502 or 503, goes to another process."""

    def __init__(self, servers: list[Daphne]):
        self.servers = list(servers)
        self.lock = threading.Lock()
        self.retried = 0  # requests a stopping process refused, or cut

    def replace(self, old: Daphne, new: Daphne) -> None:
        with self.lock:
            self.servers = [new if server is old else server for server in self.servers]

    def send(self, key: str, agent: str, content: str, idempotency_key: str, *, wait: bool = True) -> dict:
        body = json.dumps({"content": content, "wait": wait}).encode()
        headers = {"Idempotency-Key": idempotency_key}
        return self.call(key, "POST", f"/api/v1/agents/{agent}/messages", body, headers)

    def turn_when_ended(self, key: str, agent: str, turn_id: str) -> dict:
        """A send that answered at once, read until its turn has ended."""
        deadline = time.monotonic() + 180  # only a hang takes this, however loaded the machine
        while time.monotonic() < deadline:
            turn = self.call(key, "GET", f"/api/v1/agents/{agent}/turns/{turn_id}")
            if turn["status"] not in ("queued", "running"):
                return turn
            time.sleep(0.1)
        raise AssertionError(f"turn {turn_id} did not end")

    def call(self, key: str, method: str, path: str, body: bytes | None = None, headers=None) -> dict:
        for _ in range(200):
            with self.lock:
                base = random.choice(self.servers).url
            request = urllib.request.Request(base + path, data=body, method=method)
            request.add_header("Authorization", f"Bearer {key}")
            request.add_header("Content-Type", "application/json")
            for name, value in (headers or {}).items():
                request.add_header(name, value)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return json.loads(response.read())["turn"]
            except urllib.error.HTTPError as error:
                if error.code not in (502, 503):
                    raise
            except (urllib.error.URLError, ConnectionError):  # stopped listening, or cut
                pass
            self.retried += 1
            time.sleep(0.05)
        raise AssertionError("the request never got through")


def test_a_rolling_restart_under_load_loses_no_send_and_runs_none_twice(tmp_path, designer_key, define):
    for n in range(CLIENTS):
        define(f"npc{n}")
    servers, _ = start_web(tmp_path, 2, STUDIO_DB_POOL="1", STUDIO_SHUTDOWN_GRACE_SECONDS="10")
    proxy = Proxy(servers)
    answers: list[dict] = []
    failures: list[BaseException] = []
    doing: dict[str, str] = {}  # each client's step, for a client still at it at the end

    def client(n: int) -> None:
        # Half the clients wait for their turns; half are answered at once
        # (the turn runs on in the background of the process) and read it.
        waits, agent = n % 2 == 0, f"npc{n}"
        try:
            for m in range(MESSAGES):
                content = script({"sleep": 0.2}, {"say": f"{agent} message {m}"})
                doing[agent] = f"sending message {m}"
                turn = proxy.send(designer_key, agent, content, uuid.uuid4().hex, wait=waits)
                doing[agent] = f"reading turn {turn['id']} of message {m} until it ends"
                answers.append(turn if waits else proxy.turn_when_ended(designer_key, agent, turn["id"]))
            doing[agent] = "done"
        except BaseException as error:  # surfaced below
            failures.append(error)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        for index, old in enumerate(list(proxy.servers)):
            # Under load: the clients have had answers, and have more to send.
            wait_for(lambda index=index: len(answers) >= (index + 1) * CLIENTS)
            old.stop(wait=120)  # SIGTERM: it drains (the grace is 10 s; only a hang takes 120)
            new = Daphne(old.env, tmp_path / f"web{index}-again.log").wait_ready()
            proxy.replace(old, new)
        for thread in threads:
            thread.join(120)
    finally:
        stop_web(proxy.servers)

    assert not failures, failures
    stuck = {agent: step for agent, step in doing.items() if step != "done"}
    assert not stuck, f"clients still at it two minutes on: {stuck}; the web processes' logs: {tmp_path}"
    assert proxy.retried > 0  # the restarts happened under load
    assert len(answers) == CLIENTS * MESSAGES
    assert all(turn["status"] == "completed" for turn in answers), Counter(t["status"] for t in answers)
    # Each message ran once: one block says it, and its turn is the one its client got.
    said = Counter(b.entries[-1]["content"] for b in Block.objects.all())
    assert said == Counter(turn["reply"] for turn in answers)
    assert set(said.values()) == {1}
    assert not Turn.objects.filter(status=TurnStatus.FAILED, block_number__isnull=False).exists()
    assert all(check.is_consistent for check in ledger.ledger_check())
