"""PostgreSQL stopped under a real Daphne process — a PostgreSQL cluster and
a Redis of the test's own (tests/support/postgres_server.py), never this
machine's shared ones: server-sent event streams keep their keep-alives
and end with `turn.finished` once the turn ends, or with
`stream_interrupted` once nothing more can be learned (Redis gone too); a
WebSocket opened meanwhile is closed 4503, not answered 500; a turn in
flight waits the outage out, and one that cannot go on says the database
was why."""

import json
import os
import threading
import uuid

import httpx2
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from bench.launcher import Daphne, free_port
from tests.support.postgres_server import Postgres, postgres_bin
from tests.support.redis_server import Redis

from ..conftest import UNTIL_CANCELLED, call, script, wait_for

pytestmark = pytest.mark.skipif(postgres_bin() is None, reason="needs PostgreSQL's initdb and pg_ctl")

GIVE = {
    "name": "give_item",
    "description": "Hand the player an item.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}},
}
# Comment lines an idle stream sends while the database is away before the
# test brings it back: more than a stream's look at its turn (POLL_SECONDS)
# takes, at one a second.
KEEP_ALIVES_DURING = 7


@pytest.fixture(scope="module")
def postgres():
    cluster = Postgres().create()
    yield cluster
    cluster.remove()


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    server = Redis(free_port(), tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def both_running(postgres, redis):
    """Each test starts (and leaves) with both answering."""
    yield
    postgres.start()
    if redis.process.poll() is not None:
        redis.start()


def serve(postgres, redis, folder, **env) -> Daphne:
    return Daphne(
        {
            **os.environ,
            "DATABASE_URL": postgres.url,
            "REDIS_URL": f"redis://127.0.0.1:{redis.port}/0",
            "STUDIO_CHANNEL_PREFIX": f"outages-{uuid.uuid4().hex[:8]}",
            "STUDIO_COMPACTION_RUNNER": "none",
            "STUDIO_SSE_KEEP_ALIVE_SECONDS": "1",
            **env,
        },
        folder / "server.log",
    ).wait_ready()


@pytest.fixture(scope="module")
def studio(postgres, redis, tmp_path_factory):
    server = serve(postgres, redis, tmp_path_factory.mktemp("web"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def key(postgres):
    return postgres.game_key("ashmere")


@pytest.fixture
def http(studio, key):
    with httpx2.Client(base_url=studio.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        yield client


def define(http, **definition) -> str:
    """A new agent of its own for the test; its path under the API."""
    name = f"npc-{uuid.uuid4().hex[:8]}"
    response = http.put(f"/api/v1/agents/{name}", json={"systemPrompt": "You keep the inn.", **definition})
    assert response.status_code == 201, response.text
    return f"/api/v1/agents/{name}"


class Stream:
    """A server-sent event answer read in a thread of its own, raw: its
    events and its comment lines, as they come."""

    def __init__(self, http, method, path, **kwargs):
        self.events: list[tuple[str, dict]] = []
        self.comments = 0
        self.ended = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._read, args=(http, method, path), kwargs=kwargs)
        self.thread.start()

    def _read(self, http, method, path, **kwargs):
        try:
            with http.stream(method, path, **kwargs) as response:
                name = None
                for line in response.iter_lines():
                    if line.startswith(":"):
                        self.comments += 1
                    elif line.startswith("event: "):
                        name = line[len("event: ") :]
                    elif line.startswith("data: "):
                        self.events.append((name, json.loads(line[len("data: ") :])))
        except Exception as error:  # a silent stream ends as a read time-out: the test reads it
            self.error = error
        finally:
            self.ended.set()

    def saw(self, name: str) -> bool:
        return any(event == name for event, _ in self.events)

    def finish(self, timeout=60) -> list[tuple[str, dict]]:
        self.thread.join(timeout)
        assert self.ended.is_set(), "the stream is still open"
        assert self.error is None, repr(self.error)
        return self.events


def waiting_turn(http, agent: str) -> tuple[str, Stream, str]:
    """A turn waiting for the game to answer its give_item call, followed
    over GET …/events: its id, the stream, the call's id."""
    started = http.post(
        f"{agent}/messages", json={"content": script(call("give_item", item="key")), "wait": False}
    ).json()["turn"]
    stream = Stream(http, "GET", f"{agent}/turns/{started['id']}/events")
    wait_for(lambda: stream.saw("tool.requested"), timeout=30)
    return started["id"], stream, stream.events[-1][1]["callId"]


def answered_once_back(http, agent: str, turn_id: str, call_id: str) -> httpx2.Response:
    """The game's answer, posted once the studio serves again."""
    answer = {"callId": call_id, "result": "given"}
    response = None

    def posted():
        nonlocal response
        response = http.post(f"{agent}/turns/{turn_id}/tool-results", json=answer)
        return response.status_code != 503

    wait_for(posted, timeout=60)
    return response


def test_a_followed_turn_keeps_its_stream_alive_while_the_database_is_away_and_ends_with_turn_finished(
    http, postgres
):
    agent = define(http, tools=[GIVE])
    turn_id, stream, call_id = waiting_turn(http, agent)

    postgres.stop()
    before = stream.comments
    wait_for(lambda: stream.comments >= before + KEEP_ALIVES_DURING or stream.ended.is_set(), timeout=60)
    postgres.start()
    answered = answered_once_back(http, agent, turn_id, call_id)
    events = stream.finish()

    assert answered.status_code == 200
    assert stream.comments >= before + KEEP_ALIVES_DURING
    assert events[-1][0] == "turn.finished"
    assert events[-1][1]["turn"]["status"] == "completed"


def test_a_stream_that_can_learn_nothing_more_ends_with_stream_interrupted(http, postgres, redis):
    agent = define(http, tools=[GIVE])
    turn_id, stream, _ = waiting_turn(http, agent)

    redis.stop()
    postgres.stop()
    events = stream.finish()

    assert events[-1][0] == "error"
    error = events[-1][1]
    assert error["code"] == "stream_interrupted"
    assert f"GET {agent}/turns/{turn_id}/events" in error["message"]


def test_a_websocket_opened_while_the_database_is_away_is_closed_4503_saying_why(studio, postgres, key):
    postgres.stop()
    url = studio.url.replace("http", "ws") + "/ws/v1/agents/dm/events"
    with ws_connect(url, subprotocols=["studio.v1", f"bearer.{key}"], open_timeout=10) as ws:
        event = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)

    assert event["type"] == "error" and event["code"] == "unavailable"
    assert closed.value.rcvd.code == 4503


def test_a_turn_in_flight_waits_a_short_database_outage_out_and_completes(http, postgres):
    agent = define(http)
    stream = Stream(
        http,
        "POST",
        f"{agent}/messages",
        json={"content": script({"sleep": 2}, {"say": "made it"}), "stream": True},
    )
    wait_for(lambda: stream.saw("turn.started"), timeout=30)

    postgres.stop()
    # Past the model's answer: the turn's end is written once the database is back.
    before = stream.comments
    wait_for(lambda: stream.comments >= before + 3 or stream.ended.is_set(), timeout=60)
    postgres.start()
    events = stream.finish()

    finished = events[-1][1]
    assert events[-1][0] == "turn.finished", events[-1]
    assert finished["turn"]["status"] == "completed"
    assert finished["turn"]["reply"] == "made it"
    assert http.get(f"{agent}/turns/{finished['turn']['id']}").json()["turn"]["status"] == "completed"


@pytest.fixture(scope="module")
def short_lease(postgres, redis, tmp_path_factory):
    """A studio whose turns' leases lapse after 2 s unrenewed."""
    server = serve(postgres, redis, tmp_path_factory.mktemp("lease"), STUDIO_TURN_LEASE_SECONDS="2")
    yield server
    server.stop()


def test_a_turn_whose_outage_outlasts_its_lease_is_not_taken_for_dead(short_lease, postgres, key):
    with httpx2.Client(
        base_url=short_lease.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        agent = define(http)
        stream = Stream(
            http, "POST", f"{agent}/messages", json={"content": script(UNTIL_CANCELLED), "stream": True}
        )
        wait_for(lambda: stream.saw("turn.started"), timeout=30)
        turn_id = stream.events[0][1]["turnId"]

        postgres.stop()
        before = stream.comments
        wait_for(lambda: stream.comments >= before + 4 or stream.ended.is_set(), timeout=60)  # past the lease
        postgres.start()
        # Still running once the database is back: its process renewed its
        # lease, and the cancel reaches it as ever.
        wait_for(lambda: http.post(f"{agent}/turns/{turn_id}/cancel").status_code != 503, timeout=60)
        events = stream.finish()

    assert events[-1][0] == "turn.finished"
    assert events[-1][1]["turn"]["status"] == "cancelled"
