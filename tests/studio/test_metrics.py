"""GET /metrics, scraped around real turns, compactions, queued sends and
WebSocket listeners: each counter moves by what happened — the credits by
what the cost lines say — once it has committed. This process runs without
PROMETHEUS_MULTIPROC_DIR: it serves its own numbers (tests/scale sums
several processes)."""

import os
import runpy
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection, transaction
from prometheus_client.parser import text_string_to_metric_families

from agents import engine, turn_slot
from agents.engine import turn_send
from agents.models import Turn, TurnStatus
from billing.models import CostLine
from studio import heartbeats, metrics
from studio.asgi import application
from studio.errors import Unavailable
from studio.redisconn import redis_client

from ..conftest import call, error_of, in_thread, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def samples_of(text: str) -> dict:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(client) -> dict:
    response = client.get("/metrics")
    assert response.status_code == 200
    return samples_of(response.content.decode())


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class Moves:
    """What each sample moved by between two scrapes."""

    def __init__(self, before: dict, after: dict):
        self.before, self.after = before, after

    def __call__(self, name: str, **labels) -> float:
        return value(self.after, name, **labels) - value(self.before, name, **labels)


def lines_total(kind: str, field: str | None = None) -> float:
    lines = CostLine.objects.filter(kind=kind)
    return float(sum(line.detail[field] if field else line.amount for line in lines))


def test_turns_tokens_and_credits_move_by_what_the_turns_did(client, agent, send):
    before = scrape(client)

    send(script(call("close_memory", name="quest", description="Now", content="Key."), {"say": "Ok."}))
    send("hello")
    send(script({"fail": "the model is down"}))
    moved = Moves(before, scrape(client))

    assert moved("studio_turns_total", status="completed") == 2
    assert moved("studio_turns_total", status="failed") == 1
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
    assert moved("studio_turns_total", status="failed") == 1
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

    assert moved("studio_turns_total", status="failed") == 0
    assert moved("studio_turns_total", status="cancelled") == 1


def test_a_compaction_counts_with_its_seconds_tokens_and_credits(client, api, agent, send):
    send("m1")
    send("m2")
    before = scrape(client)

    assert api.post("/api/v1/agents/dm/compact").status_code == 202
    moved = Moves(before, scrape(client))

    assert moved("studio_compactions_total", status="done") == 1
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

    assert moved("studio_compactions_total", status="retried") == 1
    assert moved("studio_compactions_total", status="failed") == 1
    assert moved("studio_compactions_total", status="done") == 0
    assert moved("studio_compaction_seconds_count") == 2


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
    assert (await listener.connect(timeout=5))[0]
    refused = WebsocketCommunicator(
        application, "/ws/v1/agents/dm/events", subprotocols=["studio.v1", "bearer.sk_wrong"]
    )
    await refused.connect(timeout=5)
    assert (await refused.receive_output(timeout=5))["type"] == "websocket.close"
    during = value(samples_of(metrics.metrics_text().decode()), "studio_ws_connections")
    await listener.disconnect()
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
