"""Two web processes at once (Daphne, as in production) on one PostgreSQL
and one Redis: live events cross processes, one turn per agent holds, and
the store cap and the budget hold when sends arrive through both."""

import json
import threading
from decimal import Decimal
from itertools import pairwise

import pytest
from django.conf import settings
from websockets.sync.client import connect as ws_connect

from agents.models import Block, Turn, TurnStatus
from billing import ledger
from billing.models import Account, Adjustment
from memories.store import store_bytes
from tests.support.api import request
from tests.support.web import start_web, stop_web

from ..conftest import call, script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) between the processes"),
]


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    """Two Daphne processes, with a connection pool each as the Procfile
    runs them; yields their base URLs."""
    processes, urls = start_web(
        tmp_path_factory.mktemp("web"),
        2,
        STUDIO_STORE_CAP_BYTES="1000",
        STUDIO_DB_POOL="1",
        # Room for ten sends at once to one agent, however slowly a busy
        # machine lets the first of them start (the cap has tests of its own).
        STUDIO_MAX_QUEUED_SENDS="10",
    )
    yield urls
    stop_web(processes)


def all_at_once(jobs):
    results = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def run(index, job):
        barrier.wait()
        results[index] = job()

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def sends_at_once(urls: list[str], key: str, sends: list[tuple[str, str]]):
    """POST each (agent, content) at the same moment, spread over the web
    processes at `urls`; returns each send's (status, body)."""
    return all_at_once(
        [
            lambda i=i, agent=agent, content=content: request(
                "POST", f"{urls[i % len(urls)]}/api/v1/agents/{agent}/messages", key, {"content": content}
            )
            for i, (agent, content) in enumerate(sends)
        ]
    )


def test_an_event_from_one_process_reaches_a_listener_on_the_other(web, define, designer_key):
    define("dm")
    ws_url = web[0].replace("http", "ws") + "/ws/v1/agents/dm/events"

    with ws_connect(
        ws_url, subprotocols=["studio.v1", f"bearer.{designer_key}"], open_timeout=60
    ) as listener:
        assert json.loads(listener.recv(timeout=60))["type"] == "hello"
        status, body = request(
            "POST", web[1] + "/api/v1/agents/dm/messages", designer_key, {"content": "hello"}
        )
        types = []
        while "turn.finished" not in types:
            types.append(json.loads(listener.recv(timeout=60))["type"])

    assert status == 200
    # The reply in one delta or more (a word held up past the 50 ms a delta
    # gathers is the next one's), between the turn's start and its end.
    assert types[0] == "turn.started" and types[-1] == "turn.finished"
    assert set(types[1:-1]) == {"reply.delta"}, types


def test_sends_through_both_processes_still_run_one_at_a_time(web, define, designer_key):
    agent = define("dm")
    results = sends_at_once(
        web, designer_key, [("dm", script({"sleep": 0.05}, {"say": f"reply {i}"})) for i in range(10)]
    )

    assert [status for status, _ in results] == [200] * 10
    assert list(Block.objects.filter(agent=agent).values_list("number", flat=True)) == list(range(1, 11))
    turns = sorted(Turn.objects.filter(agent=agent), key=lambda t: t.started_at)
    assert all(t.status == TurnStatus.COMPLETED for t in turns)
    for before, after in pairwise(turns):
        assert after.started_at >= before.ended_at


def test_the_store_cap_holds_across_processes(web, define, designer_key):
    agent = define("dm")
    write = [
        script(call("close_memory", name=f"m{i:02d}", description="d", content="x" * 296)) for i in range(6)
    ]
    results = sends_at_once(web, designer_key, [("dm", content) for content in write])

    assert all(status == 200 for status, _ in results)
    assert store_bytes(agent) == 900  # three of 300 bytes fit under 1000
    refused = [body["turn"]["toolCalls"][0] for _, body in results if body["turn"]["toolCalls"][0]["isError"]]
    assert len(refused) == 3 and all("cap of 1,000 bytes" in c["result"] for c in refused)


def test_the_budget_holds_across_processes(web, define, designer_key, game):
    agents = [define(f"npc{i}") for i in range(6)]
    hold = ledger.hold_estimate(max_tokens=agents[0].max_tokens, price=ledger.model_price("scripted"))
    Account.objects.filter(game=game).update(balance=hold * 2)
    Adjustment.objects.filter(game=game).update(amount=hold * 2)
    results = sends_at_once(
        web, designer_key, [(f"npc{i}", script({"sleep": 0.3}, {"say": "ok"})) for i in range(6)]
    )

    statuses = sorted(status for status, _ in results)
    assert statuses.count(200) == 2 and statuses.count(402) == 4
    account = Account.objects.get(game=game)
    assert account.held == 0
    assert account.balance > Decimal(0)
    assert all(check.is_consistent for check in ledger.ledger_check())


# How long a request waits for a pooled connection in the tests below: the
# connections they are about must be held well past it to be noticed, and a
# busy machine (the test workers share two CPUs) may keep a request that
# only passes through waiting for a second or more.
POOL_WAIT_SECONDS = 3


def small_pool(size: int) -> dict:
    """Server settings for a pool of `size` connections that a request waits
    at most POOL_WAIT_SECONDS for."""
    return {
        "STUDIO_DB_POOL": "1",
        "STUDIO_DB_POOL_MIN": "1",
        "STUDIO_DB_POOL_MAX": str(size),
        "STUDIO_DB_POOL_TIMEOUT": str(POOL_WAIT_SECONDS),
    }


def test_turns_waiting_on_the_model_hold_no_database_connection(define, designer_key, tmp_path):
    """A pool of 2 connections, a model that takes twice as long as a
    request waits for a connection: 5 sends at once all complete, because a
    turn hands its connection back while the model works."""
    processes, (url,) = start_web(
        tmp_path,
        1,
        **small_pool(2),
        STUDIO_SCRIPTED_LATENCY_MS=str(2 * POOL_WAIT_SECONDS * 1000),
    )
    try:
        names = [f"npc{index}" for index in range(5)]
        for name in names:
            define(name)
        results = sends_at_once([url], designer_key, [(name, "hi") for name in names])
    finally:
        stop_web(processes)

    assert [status for status, _ in results] == [200] * 5, results
    assert [body["turn"]["status"] for _, body in results] == ["completed"] * 5


def test_sends_queued_behind_one_busy_agent_leave_the_pool_to_other_games(
    define, designer_key, other_game, outsider_key, tmp_path
):
    """A pool of 4 connections: game A sends 8 messages at once to one
    character while game B goes on reading and sending. Queued sends wait
    holding no connection, so B is never kept waiting for the pool."""
    from agents.services import AgentDefinition, agent_define

    processes, (url,) = start_web(
        tmp_path,
        1,
        **small_pool(4),
    )
    try:
        define("dm")
        agent_define(game=other_game, name="npc", definition=AgentDefinition(), by=None, via="command")
        burst = threading.Thread(
            target=lambda: answers.extend(
                # Eight turns of 0.8 s: the last waits 5.6 s, past the pool's wait.
                sends_at_once([url], designer_key, [("dm", script({"sleep": 0.8}, {"say": "a"}))] * 8)
            )
        )
        answers: list = []
        burst.start()
        # The burst is queued behind its first send…
        wait_for(lambda: Turn.objects.filter(agent__name="dm", status=TurnStatus.QUEUED).exists())
        other = []
        # …and B goes on reading and sending for as long as the burst runs.
        while burst.is_alive() or not other:
            other.append(request("GET", f"{url}/api/v1/agents/npc", outsider_key))
            other.append(
                request("POST", f"{url}/api/v1/agents/npc/messages", outsider_key, {"content": "hi"})
            )
        burst.join(120)
    finally:
        stop_web(processes)

    assert [status for status, _ in other] == [200] * len(other), other
    assert [status for status, _ in answers] == [200] * 8, answers
    assert [body["turn"]["status"] for _, body in answers] == ["completed"] * 8
