"""deploy/nginx.conf, as docs/operating.md tells an operator to install it, run by
Debian's nginx (scripts/services.sh installs it) in front of real Daphne
processes started as the web units start them, over TLS with a certificate
made here. Only ports and paths are changed, and the request rate of the
per-client limit (so its test counts requests rather than racing a clock).

Two web processes behind it are restarted one after the other as
docs/operating.md says, and a PostgreSQL of the test's own is stopped and
started under them, while a client that never retries sends."""

import json
import os
import re
import shutil
import ssl
import threading
import uuid
from collections import Counter
from pathlib import Path

import httpx2
import pytest
from django.conf import settings
from websockets.sync.client import connect as ws_connect

from agents.models import Block, Turn, TurnStatus
from bench.launcher import Daphne, serve
from tests.support.deploy import daphne_options
from tests.support.postgres_server import Postgres, postgres_bin
from tests.support.proxy import NGINX
from tests.support.proxy import Proxy as Nginx
from tests.support.web import start_web, stop_web

from ..conftest import script, wait_for

pytestmark = [
    pytest.mark.processes,  # nginx and Daphne, and two tests start their own outside the fixtures
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        NGINX is None, reason="nginx is not installed (scripts/services.sh installs Debian's)"
    ),
    pytest.mark.skipif(not shutil.which("openssl"), reason="openssl makes the test's certificate"),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) between the processes"),
]

# Requests per client address allowed at once: burst=100 with nodelay, and
# one for the rate (slowed to one a minute here).
AT_ONCE = 101
SEND = "/api/v1/agents/dm/messages"


@pytest.fixture(scope="module")
def daphne(django_db_setup, tmp_path_factory):
    """A web process as deploy/studio-web@.service starts it: behind a proxy
    (--proxy-headers, DJANGO_SECURE_PROXY), with a connection pool."""
    servers, _ = start_web(
        tmp_path_factory.mktemp("web"),
        1,
        options=daphne_options(),
        DJANGO_SECURE_PROXY="1",
        STUDIO_DB_POOL="1",
        STUDIO_MAX_BODY_BYTES=str(2 * 1024 * 1024),
    )
    yield servers[0]
    stop_web(servers)


@pytest.fixture(scope="module")
def nginx(daphne, tmp_path_factory):
    proxy = Nginx(tmp_path_factory.mktemp("nginx"), (daphne.port, daphne.port), rate="1r/m")
    yield proxy
    proxy.stop()


@pytest.fixture
def proxied(nginx, designer_key):
    with nginx.client(headers={"Authorization": f"Bearer {designer_key}"}) as client:
        yield client


def test_an_api_call_passes_through_over_https(proxied, agent):
    response = proxied.get("/api/v1/agents/dm")

    assert response.status_code == 200
    assert response.json()["name"] == "dm"


def test_plain_http_is_sent_to_https(nginx):
    response = httpx2.get(f"http://127.0.0.1:{nginx.http}/studio/", timeout=60)

    assert response.status_code == 301
    assert response.headers["location"] == "https://127.0.0.1/studio/"


def test_the_studio_sees_the_address_nginx_saw_not_one_the_client_claims(nginx, daphne, designer_key):
    with nginx.client(source="127.0.0.4") as client:
        client.get("/healthz", headers={"X-Real-IP": "203.0.113.9", "X-Forwarded-For": "203.0.113.9"})

    # The access line is written once the answer has gone: wait for it.
    wait_for(lambda: "/healthz 200" in daphne.log.read_text() and "127.0.0.4" in daphne.log.read_text())
    assert "203.0.113.9" not in daphne.log.read_text()


def test_a_streamed_sends_events_arrive_as_they_happen(proxied, agent, event_buffers_cleared):
    body = {"content": script({"say": "one two three four five six", "sleep": 0.3}), "stream": True}

    with proxied.stream("POST", SEND, json=body) as response:
        events = iter(httpx2.EventSource(response))
        first = next(events)
        delta = next(sse for sse in events if sse.event == "reply.delta")
        # Read while the model is still writing: nginx passed the events on
        # as they came, not once the answer was whole.
        status_meanwhile = Turn.objects.get(uuid=delta.json()["turnId"]).status
        rest = [sse.event for sse in events]

    assert response.status_code == 200
    assert first.event == "turn.started"
    assert status_meanwhile == TurnStatus.RUNNING
    assert rest[-1] == "turn.finished"


def test_a_websocket_passes_through_and_hears_a_turn(nginx, daphne, proxied, agent, designer_key):
    context = ssl.create_default_context(cafile=nginx.cert)
    url = f"wss://127.0.0.1:{nginx.https}/ws/v1/agents/dm/events"

    try:
        ws = ws_connect(
            url,
            ssl=context,
            subprotocols=["studio.v1", f"bearer.{designer_key}"],
            open_timeout=60,
            legacy=True,  # entered below, once the handshake is known to have answered
        )
    except TimeoutError as unanswered:
        raise AssertionError(f"the handshake went unanswered:\n{nginx.told(daphne)}") from unanswered
    with ws:
        assert json.loads(ws.recv(timeout=60))["type"] == "hello"
        assert proxied.post(SEND, json={"content": "Hello?"}).status_code == 200
        heard = [json.loads(ws.recv(timeout=60))["type"] for _ in range(2)]

    assert heard[0] == "turn.started"


def test_a_body_over_the_studios_limit_is_answered_413_by_nginx_in_the_apis_shape(proxied, agent):
    limit = 2 * 1024 * 1024  # STUDIO_MAX_BODY_BYTES, as the web process runs with it
    padding = b'{"padding": "' + b"x" * (limit - len(b'{"padding": ""}')) + b'"}'
    headers = {"Content-Type": "application/json"}

    at_the_limit = proxied.put("/api/v1/agents/dm", content=padding, headers=headers)
    over = proxied.put("/api/v1/agents/dm", content=padding + b" ", headers=headers)

    # The body at the limit reached the studio, which read it and refused
    # its unknown field; the one over it did not.
    assert at_the_limit.status_code == 400
    assert "X-Request-ID" in at_the_limit.headers
    assert over.status_code == 413
    assert over.json()["error"]["code"] == "too_large"
    assert "X-Request-ID" not in over.headers


def test_a_flood_from_one_address_is_answered_429_while_another_address_is_served(nginx):
    with nginx.client(source="127.0.0.2") as flood, nginx.client(source="127.0.0.3") as neighbour:
        answers = [(r.status_code, r) for r in (flood.get("/healthz") for _ in range(AT_ONCE + 20))]
        served = neighbour.get("/healthz").status_code

    assert AT_ONCE <= [status for status, _ in answers].count(200) <= AT_ONCE + 1  # +1 if a minute passed
    refused = [response for status, response in answers if status != 200]
    assert refused and all(response.status_code == 429 for response in refused)
    assert refused[0].json()["error"]["code"] == "rate_limited"
    assert refused[0].headers["Retry-After"] == "1"
    assert served == 200


def test_the_access_log_carries_the_id_the_studio_logs_each_request_under(nginx, proxied, daphne, agent):
    kept = proxied.get("/api/v1/agents/dm", headers={"X-Request-ID": "req-through-nginx-1"})
    made = proxied.get("/api/v1/agents/dm")  # no id of the client's: nginx makes one
    replaced = proxied.get("/api/v1/agents/dm", headers={"X-Request-ID": "not kept"})

    def logged(request_id: str) -> bool:
        return f" request_id={request_id} " in nginx.access_log.read_text()

    assert kept.headers["X-Request-ID"] == "req-through-nginx-1"
    made_id, replaced_id = made.headers["X-Request-ID"], replaced.headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", made_id) and re.fullmatch(r"[0-9a-f]{32}", replaced_id)
    for request_id in ("req-through-nginx-1", made_id, replaced_id):
        wait_for(lambda request_id=request_id: logged(request_id))
        # The studio's own access line for it (written once it has answered).
        wait_for(lambda request_id=request_id: request_id in daphne.log.read_text())


# --- two web processes: a rolling restart, a database outage ---------------------------------

CLIENTS = 4


def web_pair(folder: Path, **env) -> list[Daphne]:
    """Two web processes as the unit starts them, on this test run's
    database and Redis unless `env` says otherwise."""
    servers, _ = start_web(
        folder, 2, options=daphne_options(), DJANGO_SECURE_PROXY="1", STUDIO_DB_POOL="1", **env
    )
    return servers


def test_a_rolling_restart_as_the_docs_say_loses_no_send_of_a_client_that_never_retries(
    tmp_path, define, designer_key, event_buffers_cleared
):
    for n in range(CLIENTS):
        define(f"npc{n}")
    servers = web_pair(tmp_path, STUDIO_SHUTDOWN_GRACE_SECONDS="10")
    proxy = Nginx(tmp_path, (servers[0].port, servers[1].port), rate="50r/s")
    restarted = threading.Event()
    answers: list[tuple[int, dict]] = []

    def client(n: int) -> None:
        """Sends, one after another, each with a key of its own, until both
        restarts are done; any answer is final (it never retries)."""
        with proxy.client(headers={"Authorization": f"Bearer {designer_key}"}) as http:
            m = 0
            while not restarted.is_set() or m < 3:
                body = {"content": script({"sleep": 0.2}, {"say": f"npc{n} message {m}"})}
                response = http.post(
                    f"/api/v1/agents/npc{n}/messages",
                    json=body,
                    headers={"Idempotency-Key": uuid.uuid4().hex},
                )
                is_json = response.headers.get("content-type", "").startswith("application/json")
                answers.append((response.status_code, response.json() if is_json else response.text[:200]))
                m += 1

    clients = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in clients:
        thread.start()
    try:
        for index, old in enumerate(list(servers)):
            # `systemctl restart studio-web@800N`, then wait until it is ready, then the next.
            wait_for(lambda index=index: len(answers) >= (index + 1) * 2 * CLIENTS, timeout=60)
            old.stop(wait=30)  # SIGTERM: it drains
            servers[index] = Daphne(
                old.env, tmp_path / f"web{index}-again.log", options=daphne_options(), port=old.port
            ).wait_ready()
        restarted.set()
        for thread in clients:
            thread.join(120)
    finally:
        restarted.set()
        proxy.stop()
        stop_web(servers)

    assert Counter(status for status, _ in answers) == Counter({200: len(answers)}), [
        body for status, body in answers if status != 200
    ]
    assert all(body["turn"]["status"] == "completed" for _, body in answers)
    # Each message ran once, and its turn is the one its client was answered with.
    said = Counter(block.entries[-1]["content"] for block in Block.objects.all())
    assert said == Counter(body["turn"]["reply"] for _, body in answers)
    assert set(said.values()) == {1}


@pytest.fixture
def postgres():
    if postgres_bin() is None:
        pytest.skip("needs PostgreSQL's initdb and pg_ctl")
    cluster = Postgres().create()
    yield cluster
    cluster.remove()


def test_a_database_outage_takes_no_process_out_of_the_rotation_and_sends_succeed_once_it_is_back(
    tmp_path, postgres
):
    key = postgres.game_key("ashmere")
    env = {
        **os.environ,
        "DATABASE_URL": postgres.url,
        "REDIS_URL": settings.REDIS_URL,
        "STUDIO_CHANNEL_PREFIX": f"nginx-{uuid.uuid4().hex[:8]}",
        "STUDIO_COMPACTION_RUNNER": "none",
        "DJANGO_SECURE_PROXY": "1",
        "STUDIO_DB_POOL": "1",
        # A request waits this long for a connection before its 503.
        "STUDIO_DB_POOL_TIMEOUT": "2",
    }
    servers = serve(2, env, tmp_path, options=daphne_options())
    proxy = Nginx(tmp_path, (servers[0].port, servers[1].port), rate="50r/s")

    def send(http):
        body = {"content": "Is the ferry running?"}
        return http.post(SEND, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})

    try:
        with proxy.client(headers={"Authorization": f"Bearer {key}"}) as http:
            assert (
                http.put("/api/v1/agents/dm", json={"systemPrompt": "You run the ferry."}).status_code == 201
            )
            postgres.stop()
            during = [send(http) for _ in range(3)]
            alive = http.get("/healthz")
            postgres.start()
            attempts = [send(http)]
            while attempts[-1].status_code != 200 and len(attempts) < 5:
                attempts.append(send(http))
    finally:
        proxy.stop()
        stop_web(servers)

    assert [(r.status_code, r.json()["error"]["code"]) for r in during] == [(503, "unavailable")] * 3
    # The 503s took neither process out of nginx's rotation.
    assert alive.status_code == 200
    # Back within a request or two of the database (each process's pool
    # tries it again every second, not after a growing backoff).
    assert [r.status_code for r in attempts][-1] == 200 and len(attempts) <= 2, [
        (r.status_code, r.text[:200]) for r in attempts
    ]
    assert attempts[-1].json()["turn"]["status"] == "completed"
