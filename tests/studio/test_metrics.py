"""GET /metrics, scraped around real turns, compactions, queued sends and
WebSocket listeners: each counter moves by what happened — the credits by
what the cost lines say — once it has committed. This process runs without
PROMETHEUS_MULTIPROC_DIR: it serves its own numbers (tests/scale sums
several processes)."""

import os
import runpy
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents.models import Compaction, Turn, TurnStatus
from agents.sending import engine, turn_slot
from billing.models import CostLine
from studio.asgi import application
from studio.errors import Unavailable
from studio.ops import heartbeats, metrics
from studio.runtime.redisconn import redis_client
from tests.support.asgi import asgi_request, http_scope
from tests.support.metrics import Moves, samples_of, value
from tests.support.sending import turn_send

from ..conftest import call, error_of, in_thread, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def scrape(client) -> dict:
    response = client.get("/metrics")
    assert response.status_code == 200
    return samples_of(response.content.decode())


def lines_total(kind: str, field: str | None = None) -> float:
    lines = CostLine.objects.filter(kind=kind)
    return float(sum(line.detail[field] if field else line.amount for line in lines))


def test_turns_tokens_and_credits_move_by_what_the_turns_did(client, agent, send):
    before = scrape(client)

    send(script(call("close_memory", name="quest", description="Now", content="Key."), {"say": "Ok."}))
    send("hello")
    send(script({"fail": "the model is down"}))
    moved = Moves(before, scrape(client))

    assert moved("studio_turns_total", status="completed", errorCode="") == 2
    # A failed turn counts under its code, as its `errorCode` on the wire.
    assert moved("studio_turns_total", status="failed", errorCode="model_error") == 1
    assert moved("studio_turn_seconds_count") == 3
    # Two calls for the tool call and its answer, one for "hello", one that failed.
    assert moved("studio_model_call_seconds_count", provider="scripted") == 4
    assert moved("studio_model_tokens_total", kind="input") == lines_total("model", "inputTokens")
    assert moved("studio_model_tokens_total", kind="output") == lines_total("model", "outputTokens")
    assert moved("studio_model_tokens_total", kind="cached") == lines_total("model", "cachedInputTokens") == 0
    assert moved("studio_credits_charged_total", kind="model") == pytest.approx(lines_total("model"))
    assert moved("studio_credits_charged_total", kind="memory_access") == pytest.approx(
        lines_total("memory_access")
    )
    assert lines_total("model") > 0 and lines_total("memory_access") > 0


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite stores a NUL")
def test_a_charge_that_rolled_back_is_not_counted(client, agent, send, monkeypatch):
    # A NUL let through to PostgreSQL: the turn's first ending (completed,
    # charging its model call) rolls back; it ends failed, charging it then.
    monkeypatch.setattr(engine, "storable", lambda text: text)
    before = scrape(client)

    turn = send(script({"say": "x\x00y"}))
    moved = Moves(before, scrape(client))

    assert turn["errorCode"] == "unstorable_output"
    assert moved("studio_turns_total", status="failed", errorCode="unstorable_output") == 1
    assert moved("studio_credits_charged_total", kind="model") == pytest.approx(lines_total("model"))


def test_a_turn_whose_ending_rolled_back_is_not_counted(client, agent):
    running = in_thread(turn_send, agent=agent, content=script({"sleep": 5}, {"say": "slow"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    before = scrape(client)

    with pytest.raises(RuntimeError), transaction.atomic():
        turn_slot.turn_finish(Turn.objects.get(agent=agent), TurnStatus.FAILED, error="never", code="x")
        raise RuntimeError("what ended it is undone")
    turn_slot.turn_cancel(Turn.objects.get(agent=agent))
    running[0].join(10)
    moved = Moves(before, scrape(client))

    assert moved("studio_turns_total", status="failed", errorCode="x") == 0
    assert moved("studio_turns_total", status="cancelled", errorCode="") == 1


def test_a_compaction_counts_with_its_seconds_tokens_and_credits(client, api, agent, send):
    send("m1")
    send("m2")
    before = scrape(client)

    assert api.post("/api/v1/agents/dm/compact").status_code == 202
    moved = Moves(before, scrape(client))

    assert moved("studio_compactions_total", status="done", errorCode="") == 1
    assert moved("studio_compaction_seconds_count") == 1
    charged = lines_total("compaction")
    assert moved("studio_credits_charged_total", kind="compaction") == pytest.approx(charged) and charged > 0
    assert moved("studio_model_tokens_total", kind="input") == lines_total("compaction", "inputTokens") > 0


def test_a_failing_compaction_counts_each_retry_and_its_failure(client, api, agent, send, studio_conf):
    studio_conf(COMPACTION_MAX_ATTEMPTS=2)
    send("@compactor-fail the compactor is down")
    send("m2")
    before = scrape(client)

    api.post("/api/v1/agents/dm/compact")
    moved = Moves(before, scrape(client))

    # Each failed attempt under its error code; the model's failures counted by kind too.
    assert moved("studio_compactions_total", status="retried", errorCode="model_error") == 1
    assert moved("studio_compactions_total", status="failed", errorCode="model_error") == 1
    assert moved("studio_compactions_total", status="done", errorCode="") == 0
    assert moved("studio_compaction_seconds_count") == 2
    assert moved("studio_model_call_errors_total", provider="scripted", kind="other") == 2


def test_a_send_waiting_behind_a_running_turn_counts_in_sends_queued_until_it_starts(client, agent):
    running = in_thread(turn_send, agent=agent, content=script({"sleep": 5}, {"say": "slow"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    queued = in_thread(turn_send, agent=agent, content="next")
    wait_for(lambda: value(scrape(client), "studio_sends_queued") == 1)

    turn_slot.turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    for thread, _ in (running, queued):
        thread.join(10)

    assert queued[1]["result"].status == TurnStatus.COMPLETED
    assert value(scrape(client), "studio_sends_queued") == 0


def test_a_send_that_gives_up_waiting_is_no_longer_counted_in_sends_queued(client, agent, studio_conf):
    studio_conf(SEND_WAIT_SECONDS=1)
    running = in_thread(turn_send, agent=agent, content=script({"sleep": 5}, {"say": "slow"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    with pytest.raises(Unavailable):
        turn_send(agent=agent, content="next")
    waiting_after = value(scrape(client), "studio_sends_queued")
    turn_slot.turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    running[0].join(10)

    assert waiting_after == 0


async def test_a_websocket_listener_counts_in_ws_connections_while_connected(define, designer_key):
    await database_sync_to_async(define)("dm")
    before = value(samples_of(metrics.metrics_text().decode()), "studio_ws_connections")

    listener = WebsocketCommunicator(
        application, "/ws/v1/agents/dm/events", subprotocols=["studio.v1", f"bearer.{designer_key}"]
    )
    assert (await listener.connect(timeout=60))[0]
    refused = WebsocketCommunicator(
        application, "/ws/v1/agents/dm/events", subprotocols=["studio.v1", "bearer.sk_wrong"]
    )
    await refused.connect(timeout=60)
    assert (await refused.receive_output(timeout=60))["type"] == "websocket.close"
    during = value(samples_of(metrics.metrics_text().decode()), "studio_ws_connections")
    await listener.disconnect()
    await refused.disconnect(timeout=3)  # its consumer still listens on the channel layer: cancelled
    after = value(samples_of(metrics.metrics_text().decode()), "studio_ws_connections")

    assert (during - before, after - before) == (1, 0)


def test_metrics_are_open_without_a_token_and_in_the_prometheus_text_format(client):
    response = client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"# TYPE studio_turns_total counter" in response.content


def test_with_a_metrics_token_set_a_scrape_needs_it(client, settings):
    settings.STUDIO_METRICS_TOKEN = "scrape-me-7f3a"

    missing = client.get("/metrics")
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me-7f3b")
    right = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me-7f3a")

    assert (missing.status_code, wrong.status_code, right.status_code) == (401, 401, 200)
    assert missing["WWW-Authenticate"] == "Bearer"
    assert error_of(missing)["code"] == "unauthenticated"
    assert b"studio_turns_total" in right.content


def test_an_empty_prometheus_multiproc_dir_counts_in_this_process_as_if_unset(monkeypatch):
    # Left set, prometheus-client would count in files in the working directory.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")

    read = runpy.run_path(str(Path(__file__).resolve().parents[2] / "studio" / "settings.py"))

    assert read["PROMETHEUS_MULTIPROC_DIR"] == ""
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ


@pytest.mark.skipif(not settings.REDIS_URL, reason="heartbeats are kept in Redis")
@pytest.mark.parametrize("multiprocess", [False, True], ids=["one process", "multiprocess"])
def test_the_workers_heartbeats_are_scraped_from_any_web_process(client, monkeypatch, tmp_path, multiprocess):
    if multiprocess:
        monkeypatch.setattr(metrics, "MULTIPROC_DIR", str(tmp_path))
    redis_client().delete(heartbeats.workers_key())
    heartbeats.worker_heartbeat("celery@w1")
    heartbeats.worker_heartbeat("celery@w2")
    heartbeats.worker_heartbeat("celery@w3")
    # w3 went quiet two minutes ago: no longer live, its age still shown.
    redis_client().zincrby(heartbeats.workers_key(), -120, "celery@w3")

    samples = scrape(client)
    redis_client().delete(heartbeats.workers_key())

    assert value(samples, "studio_workers_live") == 2
    assert 0 <= value(samples, "studio_worker_heartbeat_age_seconds", worker="celery@w1") < 5
    assert 120 <= value(samples, "studio_worker_heartbeat_age_seconds", worker="celery@w3") < 125


# --- requests -----------------------------------------------------------------------------


async def test_each_request_counts_by_its_route_kind_and_status_class_never_its_path():
    before = samples_of(metrics.metrics_text().decode())
    await asgi_request(http_scope("/healthz"))
    await asgi_request(http_scope("/api/v1/agents/mara-s-own-agent/messages", method="POST"))
    await asgi_request(http_scope("/api/v1/agents/mara-s-own-agent/turns/t-1/events"))
    await asgi_request(http_scope("/api/v1/agents/mara-s-own-agent/turns"))
    await asgi_request(http_scope("/studio/"))
    after = samples_of(metrics.metrics_text().decode())
    moved = Moves(before, after)

    seconds = "studio_http_request_seconds_count"
    assert moved(seconds, route="ops", status="2xx") == 1
    assert moved(seconds, route="send", status="4xx") == 1  # no key: 401
    assert moved(seconds, route="events", status="4xx") == 1
    assert moved(seconds, route="api", status="4xx") == 1
    assert moved(seconds, route="page", status="3xx") == 1  # to sign in
    assert not any("mara-s-own-agent" in str(labels) for _, labels in after)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a database reached over the network")
async def test_a_5xx_counts_in_its_status_class(monkeypatch):
    from django.db import connections

    from studio.ops import health

    # The readiness checks' own connections go to a port nothing listens on.
    monkeypatch.setitem(connections.settings["default"], "HOST", "127.0.0.1")
    monkeypatch.setitem(connections.settings["default"], "PORT", "1")
    health.readiness_forget()
    before = samples_of(metrics.metrics_text().decode())

    status, _ = await asgi_request(http_scope("/readyz"))

    health.readiness_forget()
    assert status == 503
    moved = Moves(before, samples_of(metrics.metrics_text().decode()))
    assert moved("studio_http_request_seconds_count", route="ops", status="5xx") == 1


# --- read from the database at each scrape ------------------------------------------------


def test_the_oldest_queued_send_is_how_long_it_has_waited(client, agent):
    running = in_thread(turn_send, agent=agent, content=script({"sleep": 5}, {"say": "slow"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    idle = value(scrape(client), "studio_send_queue_oldest_seconds")
    queued = in_thread(turn_send, agent=agent, content="next")
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.QUEUED).exists())
    Turn.objects.filter(status=TurnStatus.QUEUED).update(created_at=timezone.now() - timedelta(seconds=90))

    waiting = value(scrape(client), "studio_send_queue_oldest_seconds")
    turn_slot.turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    for thread, _ in (running, queued):
        thread.join(10)

    assert ("studio_send_queue_oldest_seconds", ()) in scrape(client)
    assert idle == 0
    assert 90 <= waiting < 150


def test_the_oldest_compaction_not_yet_done_is_how_long_ago_it_was_asked_for(
    client, api, agent, send, studio_conf
):
    studio_conf(COMPACTION_RUNNER="none")
    send("m1")
    send("m2")
    none_yet = value(scrape(client), "studio_compaction_queue_oldest_seconds")

    api.post("/api/v1/agents/dm/compact")
    Compaction.objects.update(created_at=timezone.now() - timedelta(seconds=600))
    queued = value(scrape(client), "studio_compaction_queue_oldest_seconds")
    Compaction.objects.update(awaits_credits=True)
    waiting_for_credits = value(scrape(client), "studio_compaction_queue_oldest_seconds")

    assert ("studio_compaction_queue_oldest_seconds", ()) in scrape(client)
    assert none_yet == 0
    assert 600 <= queued < 660
    assert waiting_for_credits == 0  # no worker can help it: the game's credits can


def test_the_credits_held_are_what_the_accounts_hold(client, agent):
    running = in_thread(turn_send, agent=agent, content=script({"sleep": 5}, {"say": "slow"}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    during = value(scrape(client), "studio_credits_held")
    turn_slot.turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    running[0].join(10)

    held = float(Turn.objects.get(agent=agent).held)
    assert held > 0 and during == pytest.approx(held)
    assert value(scrape(client), "studio_credits_held") == 0
    assert ("studio_credits_held", ()) in scrape(client)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a database reached over the network")
def test_a_scrape_while_the_database_is_down_still_answers_with_what_the_processes_counted(
    client, monkeypatch
):
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "HOST", "127.0.0.1")
    monkeypatch.setitem(connection.settings_dict, "PORT", "1")
    try:
        response = client.get("/metrics")
    finally:
        connection.close()
        monkeypatch.undo()

    assert response.status_code == 200
    assert b"# TYPE studio_turns_total counter" in response.content
    assert b"studio_credits_held" not in response.content


# --- the connection pool --------------------------------------------------------------------


@pytest.mark.skipif(connection.vendor != "postgresql", reason="Django's connection pool is PostgreSQL's")
def test_a_request_that_waits_for_a_pooled_connection_counts_its_wait_and_one_that_gives_up_too():
    from django.db.backends.postgresql.base import DatabaseWrapper

    # A pool of one connection with a wait of 3 s (far past the moment the
    # holder takes to give it back, on a loaded machine too), its
    # connections taken as a request takes them.
    pool_wait = 3
    pooled = {
        **connection.settings_dict,
        "OPTIONS": {"pool": {"min_size": 0, "max_size": 1, "timeout": pool_wait}},
    }
    held = threading.Event()

    def hold_until_waited_for() -> None:
        holder = DatabaseWrapper(pooled, alias="pool-test")
        holder.ensure_connection()
        held.set()
        wait_for(lambda: holder.pool.get_stats().get("requests_waiting", 0) > 0)
        holder.close()

    def take() -> None:
        DatabaseWrapper(pooled, alias="pool-test").ensure_connection()

    waiter = DatabaseWrapper(pooled, alias="pool-test")
    before = samples_of(metrics.metrics_text().decode())
    try:
        holding = threading.Thread(target=hold_until_waited_for)
        holding.start()
        assert held.wait(60)
        waiter.ensure_connection()  # waits until the holder gives the connection back
        holding.join(60)
        late = in_thread(take)  # waits in vain: the waiter keeps it
        late[0].join(60)
        waiter.close()
        waiter.ensure_connection()  # the pool's counters are read as a connection is taken
    finally:
        waiter.close()
        waiter.close_pool()
    moved = Moves(before, samples_of(metrics.metrics_text().decode()))

    assert "couldn't get a connection" in str(late[1]["error"])
    # The first waited too, for the pool to open a connection: none was free.
    assert moved("studio_db_pool_waits_total") == 3
    assert moved("studio_db_pool_timeouts_total") == 1
    # At least the wait the second gave up after.
    assert moved("studio_db_pool_wait_seconds_total") >= pool_wait
