"""A hostile tenant beside a quiet one, on the production setup: two Daphne
processes with connection pools, PostgreSQL, Redis, and a model provider
(the OpenAI fake on loopback, through the official SDK) that counts what it
bills.

One game does everything a designer key and an admin key allow at once:
cancel storms on a slow model, a send retried over and over under one
Idempotency-Key, forks and big imports as fast as it may, and a flood of
WebSocket listeners. The other sends as a game does.
Afterwards: the quiet game's sends all succeeded and none of them waited
behind the hostile game's work: the hostile game's cancelled model calls are
held open by the provider until the quiet game's last send has been served,
so a quiet send queued behind one would never have been answered (how much
slower the quiet sends ran is a figure for bench/hostile_tenant.py, not a
test; the hostile requests arrive as a proxy's per-client limit lets them
through: a flood that reaches a process costs it CPU to refuse, which no
quota inside it can save); every hostile request was answered, and every
refusal it met is one the contract names for what it did (which of them it
meets first is a race that a loaded machine decides differently); no balance
went below zero; every call the provider billed was charged exactly once
(the provider's count and the ledger's agree, per game); checkledger is
satisfied; and no request got a 5xx."""

import json
import os
import statistics
import threading
import time
import uuid
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from agents.models import LIVE_STATUSES, Turn
from agents.services import AgentDefinition, agent_define
from billing import ledger
from billing.models import Account, CostLine, ModelPrice
from studio.auth.keys import apikey_create
from studio.models import Role
from studio.services import game_create
from tests.support.api import call_api
from tests.support.fake_openai import FakeOpenAI, completion
from tests.support.web import start_web, stop_web

from ..conftest import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the production setup: PostgreSQL with a pool"
    ),
]

MODEL = "openai:gpt-test"
HOSTILE = "A ghost."  # in the system prompt of each of the hostile game's agents
SLOW = "[slow]"  # in a system prompt: the fake answers it after a while…
SLOW_SECONDS = 1.5  # …this long
# In a system prompt: the fake holds the call open until the test releases
# it, once the quiet game's sends are done (HOLD_MAX_SECONDS only ends it
# should the test never get there).
HELD = "[held]"
HOLD_MAX_SECONDS = 300
BILLED = (500, 20)  # what the fake reports each call cost: tokens in, out
# The quiet game's sends, in rounds that alternate the hostile game's load
# off and on, so the machine's own drift (other tests, other processes)
# falls on both figures alike.
ROUNDS, SENDS_A_ROUND = 10, 4
# A proxy's per-client limit (nginx's limit_req, which docs/operating.md asks for):
# each hostile thread makes about 10 requests a second at most.
PROXY_PACE_SECONDS = 0.1
# The refusals the contract names for what the hostile game does, by what
# it did: (status, code). Which of them a request meets first (the send
# rate, the game's live turns, the agent's queue, the credits) is a race.
SEND_REFUSALS = {
    (429, "rate_limited"),  # STUDIO_SEND_RATE
    (429, "game_busy"),  # STUDIO_MAX_LIVE_TURNS_PER_GAME (held calls count)
    (429, "agent_busy"),  # STUDIO_MAX_QUEUED_SENDS, or an Idempotency-Key's followers
    (402, "budget_exhausted"),  # its credits, less what its live turns hold
}
REFUSALS = {
    "send": SEND_REFUSALS,
    "retry": SEND_REFUSALS,
    "cancel": {(409, "turn_ended")},  # it ended (refused, failed) before the cancel
    # STUDIO_MAX_AGENTS_PER_GAME, or STUDIO_DEFINITION_RATE (which paces forks
    # and imports with definitions): which one a fork meets first is a race.
    "fork": {(403, "quota_exceeded"), (429, "rate_limited")},
    "import": {(403, "quota_exceeded"), (429, "rate_limited")},
    "listen": {(429, "too_many_streams")},  # STUDIO_MAX_STREAMS_PER_GAME
}


class Calls:
    """The fake's answers: quick for the quiet game, after SLOW_SECONDS for
    a slow agent, and when the test releases them for a held one; `held`
    counts the held calls that arrived, `pending` those not yet answered."""

    def __init__(self):
        self.release = threading.Event()
        self.held = self.pending = 0
        self._lock = threading.Lock()

    def answer_for(self, body) -> dict:
        system = body["messages"][0]["content"] if isinstance(body, dict) and body.get("messages") else ""
        if HELD in system:
            with self._lock:
                self.held += 1
                self.pending += 1
            try:
                self.release.wait(HOLD_MAX_SECONDS)
            finally:
                with self._lock:
                    self.pending -= 1
            return completion("Far too late.", usage=BILLED)
        slow = SLOW in system
        return completion(
            "The ferryman nods." if not slow else "Far too late.",
            usage=BILLED,
            delay=SLOW_SECONDS if slow else 0,
        )


def quiet_sends(base: str, key: str, count: int = SENDS_A_ROUND) -> list[float]:
    """The quiet game's sends, one after another, each answered 200 with its
    turn completed: each one's seconds (a figure for the benchmark)."""
    took = []
    for n in range(count):
        started = time.perf_counter()
        status, body = call_api(
            base, key, "POST", "/agents/innkeeper/messages", {"content": f"Ale, please ({n})."}
        )
        took.append(time.perf_counter() - started)
        assert status == 200 and body["turn"]["status"] == "completed", (status, body)
    return took


def p95(seconds: list[float]) -> float:
    return statistics.quantiles(seconds, n=20)[-1]


class Hostile:
    """Everything the hostile game does, each in threads of its own while
    `active` is set, until `stop` is; `answers` keeps every (status, code)
    it got, `unanswered` every request that got no answer at all."""

    def __init__(self, urls: list[str], designer: str, admin: str, big_file: dict):
        self.urls, self.designer, self.admin, self.big_file = urls, designer, admin, big_file
        self.stop, self.active = threading.Event(), threading.Event()
        self.answers: list[tuple[str, int, str | None]] = []  # (what it did, status, code)
        self.unanswered: list[str] = []
        self.sockets: list = []
        self.threads = [
            threading.Thread(target=self._guarded, args=(work, i), daemon=True)
            for i, work in enumerate(
                [self.cancel_storm, self.cancel_storm, self.retries, self.forks, self.imports]
            )
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()
        self.flood()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        closing = [threading.Thread(target=socket.close) for socket in self.sockets]
        for thread in closing:  # at once: a flood's listeners all go together
            thread.start()
        for thread in closing:
            thread.join(5)

    def _guarded(self, work, index: int) -> None:
        try:
            # As fast as the proxy in front lets one client go: requests it
            # refuses at its own rate limit never reach the studio.
            while not self.stop.wait(PROXY_PACE_SECONDS):
                if self.active.wait(0.1):
                    work(self.urls[index % 2], index)
        except Exception as error:  # no answer (a timeout, a dropped connection)
            self.unanswered.append(f"{work.__name__}: {error!r}")
        finally:
            connection.close()

    def _note(self, what: str, status: int, body: dict) -> dict:
        self.answers.append((what, status, (body.get("error") or {}).get("code")))
        return body

    def cancel_storm(self, base: str, index: int) -> None:
        agent = f"h{index}"
        status, body = call_api(
            base,
            self.designer,
            "POST",
            f"/agents/{agent}/messages",
            {"content": "Tell me everything.", "wait": False},
        )
        self._note("send", status, body)
        if status == 202:
            turn = body["turn"]["id"]
            self._note(
                "cancel", *call_api(base, self.designer, "POST", f"/agents/{agent}/turns/{turn}/cancel")
            )

    def retries(self, base: str, index: int) -> None:
        key, body = uuid.uuid4().hex, {"content": "Once only."}

        def repeat(url: str) -> None:
            try:
                self._note(
                    "retry",
                    *call_api(
                        url, self.designer, "POST", "/agents/h9/messages", body, {"Idempotency-Key": key}
                    ),
                )
            except Exception as error:  # no answer
                self.unanswered.append(f"retries: {error!r}")

        repeats = [threading.Thread(target=repeat, args=(self.urls[n % 2],)) for n in range(12)]
        for thread in repeats:
            thread.start()
        for thread in repeats:
            thread.join(60)

    def forks(self, base: str, index: int) -> None:
        name = f"fork-{uuid.uuid4().hex[:8]}"
        self._note(
            "fork", *call_api(base, self.designer, "POST", "/agents/h9/fork", {"name": name, "atBlock": 1})
        )

    def imports(self, base: str, index: int) -> None:
        document = {**self.big_file, "name": f"imp-{uuid.uuid4().hex[:8]}"}
        self._note("import", *call_api(base, self.admin, "POST", "/agents/import", document))

    def flood(self) -> None:
        """Listeners, as many as it is let have, and then some."""
        for n in range(40):
            url = self.urls[n % 2].replace("http", "ws") + "/ws/v1/agents/h9/events"
            try:
                socket = ws_connect(
                    url,
                    subprotocols=["studio.v1", f"bearer.{self.designer}"],
                    open_timeout=60,
                    close_timeout=1,
                    ping_interval=None,  # it only holds its place
                    legacy=True,  # held past this block, not in a `with`
                )
                hello = json.loads(socket.recv(timeout=60))
            except ConnectionClosed as closed:
                if closed.rcvd is not None and closed.rcvd.code == 4429:
                    # The refusal's close code, which the contract names (its
                    # error event was not read before it, once in three runs).
                    self.answers.append(("listen", 429, "too_many_streams"))
                else:
                    self.unanswered.append(f"listener: {closed!r}")
                continue
            except Exception as error:  # no hello, nor an error event
                self.unanswered.append(f"listener: {error!r}")
                continue
            if hello.get("type") == "error":
                self.answers.append(("listen", 429, hello.get("code")))
                socket.close()
            else:
                self.sockets.append(socket)


def big_file(urls: list[str], key: str) -> dict:
    """An agent file of a few hundred kilobytes: the export of h9, its first
    block's message made long and copied across many blocks."""
    status, document = call_api(urls[0], key, "GET", "/agents/h9/export")
    assert status == 200, document
    block = document["blocks"][0]
    block["entries"][0]["content"] = "The bells ring under the water. " * 500
    blocks = []
    for n in range(1, 41):
        turn = {**block["turn"], "id": str(uuid.uuid4())} if block["turn"] else None
        blocks.append({**block, "block": n, "turn": turn, "context": None})
    return {**document, "blocks": blocks, "memoryHistory": [], "checkpoints": [], "recordedFromBlock": 1}


def billed_per_game(model: FakeOpenAI) -> Counter:
    counted: Counter = Counter()
    for body, usage in model.billed:
        system = body["messages"][0]["content"]
        game = "hostile" if HOSTILE in system else "quiet"
        counted[game] += usage["prompt_tokens"] + usage["completion_tokens"]
    return counted


def charged_per_game(games: dict) -> Counter:
    charged: Counter = Counter()
    for label, game in games.items():
        for line in CostLine.objects.filter(game=game, kind="model"):
            charged[label] += line.detail["inputTokens"] + line.detail["outputTokens"]
    return charged


def test_a_hostile_tenant_takes_nothing_the_others_share_and_pays_for_every_call(tmp_path):
    model, calls = FakeOpenAI(keep_alive=True).start(), Calls()
    model.answer_for = calls.answer_for
    ModelPrice.objects.create(model=MODEL, input_per_mtok=2, output_per_mtok=8)
    hostile, admin = game_create(slug="hostile", credits=5)
    quiet, quiet_key = game_create(slug="quiet", credits=100)
    designer = apikey_create(game=hostile, role=Role.DESIGNER)[1]
    # The cancel storms' agents (h0, h1…) hold their calls; h9, which the
    # retries, forks, imports and listeners use, answers slowly.
    for name in [f"h{n}" for n in range(10)]:
        marker = SLOW if name == "h9" else HELD
        agent_define(
            game=hostile,
            name=name,
            definition=AgentDefinition(model=MODEL, system_prompt=f"{marker} {HOSTILE}"),
            by=None,
            via="command",
        )
    agent_define(
        game=quiet,
        name="innkeeper",
        definition=AgentDefinition(model=MODEL, system_prompt="An innkeeper."),
        by=None,
        via="command",
    )
    env = {
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
        "STUDIO_DB_POOL": "1",
        "STUDIO_DB_POOL_MAX": "8",
        "STUDIO_SEND_RATE": "40/s",
        "STUDIO_MAX_LIVE_TURNS_PER_GAME": "8",
        "STUDIO_MAX_STREAMS_PER_GAME": "20",
        "STUDIO_MAX_AGENTS_PER_GAME": "25",
        "STUDIO_MAX_QUEUED_SENDS": "4",
        # Longer than the held calls are held.
        "STUDIO_MODEL_TIMEOUT_SECONDS": str(HOLD_MAX_SECONDS * 2),
        "STUDIO_MODEL_MAX_RETRIES": "0",
    }
    processes, urls = start_web(tmp_path, 2, **env)
    try:
        status, _ = call_api(urls[0], designer, "POST", "/agents/h9/messages", {"content": "A first block."})
        assert status == 200
        quiet_sends(urls[1], quiet_key, 20)  # warm: the SDK and the pool's connections are made once
        attack = Hostile(urls, designer, admin, big_file(urls, designer))
        attack.start()
        calm, loaded, held_meanwhile = [], [], []
        for _ in range(ROUNDS):
            attack.active.clear()
            time.sleep(0.3)  # the attack pauses (how far is not what is tested)
            calm += quiet_sends(urls[1], quiet_key)
            attack.active.set()
            time.sleep(0.3)  # the attack resumes
            loaded += quiet_sends(urls[1], quiet_key)
            held_meanwhile.append(calls.pending)
        attack.finish()
        # The quiet game's last sends were all served while the hostile game
        # held model calls open (none had been answered yet).
        assert calls.held and held_meanwhile[-1], (calls.held, held_meanwhile)
        calls.release.set()
        # Every call the hostile game abandoned ends, and is charged, in the background.
        wait_for(lambda: not Turn.objects.filter(status__in=LIVE_STATUSES).exists(), timeout=120)
        wait_for(lambda: not Turn.objects.filter(open_call_tokens__isnull=False).exists(), timeout=120)
    finally:
        calls.release.set()
        stop_web(processes)
        model.stop()

    # Every hostile request was answered: served, or refused with one of
    # the refusals the contract names (never a 5xx); which of them it met
    # depends on how fast the machine let it go, and is not tested.
    assert not attack.unanswered, attack.unanswered[:5]
    answers = Counter(status for _, status, _ in attack.answers)
    assert not [status for status in answers if status >= 500], answers
    refusals = Counter(answer for answer in attack.answers if answer[1] >= 400)
    assert all((status, code) in REFUSALS[what] for what, status, code in refusals), refusals
    # The flood asked for twice the streams the game may hold.
    assert refusals["listen", 429, "too_many_streams"] >= 20, refusals
    # The quiet game: every send served (quiet_sends asserts each answered
    # 200), none queued behind the hostile game's held calls (above).
    assert len(loaded) == len(calm) == ROUNDS * SENDS_A_ROUND
    if figures := os.environ.get("STUDIO_BENCH_FIGURES"):  # bench/hostile_tenant.py
        Path(figures).write_text(json.dumps({"calm_p95": p95(calm), "loaded_p95": p95(loaded)}))
    # Money: nothing below zero, every billed call charged once, the ledger exact.
    assert all(balance >= 0 for balance in Account.objects.values_list("balance", flat=True))
    games = {"hostile": hostile, "quiet": quiet}
    assert billed_per_game(model)["hostile"] > 0  # its cancelled calls were billed…
    assert charged_per_game(games) == billed_per_game(model)  # …and charged, once each
    assert all(check.is_consistent for check in ledger.ledger_check()), ledger.ledger_check()
    call_command("checkledger", stdout=StringIO())
