"""What an operator alerts on (#37): the release running, when each periodic
job last ran, the games whose credits run low, open event streams, events
that could not be published — and a scrape that answers while the
database does not."""

import concurrent.futures
import socket
import threading
import urllib.request
import uuid
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

import studio
from agents.sending.turn_slot import turn_cancel
from billing.models import Account
from studio.live import event_types, events
from studio.models import Game, JobRun
from studio.ops import metrics, process_metrics
from studio.ops.jobs import job_ran
from tests.live.test_stream_doors import follow_slow_turn
from tests.support.metrics import samples_of, value
from tests.support.web import start_web, stop_web
from tests.support.worker import Worker

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def scrape(client) -> dict:
    response = client.get("/metrics")
    assert response.status_code == 200
    return samples_of(response.content.decode())


def test_the_release_is_in_the_metrics_and_healthz(client):
    samples = scrape(client)

    [(labels, one)] = [(dict(key[1]), v) for key, v in samples.items() if key[0] == "studio_build_info"]
    assert (labels["version"], one) == (studio.__version__, 1)
    assert client.get("/healthz").json()["version"] == studio.__version__


def test_each_periodic_job_shows_when_it_last_ran(client):
    long_ago = timezone.now() - timedelta(days=2)
    job_ran("backup", at=long_ago)

    call_command("sweep", stdout=StringIO())
    call_command("prune", "--dry-run", stdout=StringIO())  # a dry run deletes nothing: not a prune
    samples = scrape(client)
    call_command("prune", stdout=StringIO())
    pruned = scrape(client)

    now = timezone.now().timestamp()
    assert now - value(samples, "studio_last_run_timestamp_seconds", job="sweep") < 60
    assert value(samples, "studio_last_run_timestamp_seconds", job="backup") == long_ago.timestamp()
    assert ("studio_last_run_timestamp_seconds", (("job", "prune"),)) not in samples
    assert now - value(pruned, "studio_last_run_timestamp_seconds", job="prune") < 60


def test_a_job_run_again_moves_its_time_and_keeps_one_row():
    job_ran("backup", at=timezone.now() - timedelta(hours=1))
    job_ran("backup")

    [run] = JobRun.objects.filter(job="backup")
    assert timezone.now() - run.last_at < timedelta(minutes=1)
    with pytest.raises(ValueError, match="unknown job"):
        job_ran("backups")


def test_the_balances_shown_are_those_of_the_games_lowest_in_credits(client, studio_conf):
    studio_conf(METRICS_GAMES=2)
    for slug, balance in [("rich", "900"), ("poor", "3"), ("middling", "50")]:
        game = Game.objects.create(slug=slug)
        Account.objects.create(game=game, balance=Decimal(balance))

    samples = scrape(client)
    studio_conf(METRICS_GAMES=0)
    none = scrape(client)

    shown = {dict(key[1])["game"]: v for key, v in samples.items() if key[0] == "studio_game_balance_credits"}
    assert shown == {"poor": 3.0, "middling": 50.0}
    assert not any(key[0] == "studio_game_balance_credits" for key in none)


@pytest.mark.usefixtures("event_buffers_cleared", "stream_slots_cleared")
async def test_an_open_event_stream_counts_in_sse_streams_until_it_ends(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    before = value(samples_of(metrics.metrics_text().decode()), "studio_sse_streams")

    answer, turn, running = await follow_slow_turn(agent, designer_key)
    during = value(samples_of(metrics.metrics_text().decode()), "studio_sse_streams")
    await answer.close()
    await database_sync_to_async(turn_cancel)(turn)
    await running
    after = value(samples_of(metrics.metrics_text().decode()), "studio_sse_streams")

    assert (during - before, after - before) == (1, 0)


@pytest.mark.skipif(not settings.REDIS_URL, reason="events are published through Redis")
def test_an_event_that_cannot_be_published_is_counted(monkeypatch, agent, caplog):
    async def refused(*args, **kwargs):
        raise ConnectionError("Redis is away")

    layer = get_channel_layer()
    monkeypatch.setattr(layer, "group_send", refused)
    monkeypatch.setattr(events, "_buffers", lambda layer: _Listened())
    before = failures()

    events.publish(agent.pk, event_types.reply_delta(agent=agent.name, turn_id="t", text="hello"))

    # Published from a thread of its own, which counts the failure, then logs it.
    wait_for(lambda: "could not publish reply.delta" in caplog.text)
    assert failures() - before == 1


def failures() -> float:
    return value(samples_of(metrics.metrics_text().decode()), "studio_event_publish_failures_total")


class _Listened:
    """An agent's event buffer that stamps events and says someone listens."""

    def append_heard(self, agent_id, event):
        return {**event, "seq": 1}, True

    append = append_heard


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a database reached over the network")
def test_a_scrape_while_the_database_hangs_answers_without_its_gauges(client, monkeypatch):
    """A database that takes connections and never answers (a server
    frozen, a network dropping packets): the scrape answers all the same,
    marking what the database would have said as absent, and later scrapes
    do not wait on the read still stuck."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # never accepted, never answered
    monkeypatch.setattr(metrics, "DATABASE_SECONDS", 0.5)
    started = threading.active_count()
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "HOST", "127.0.0.1")
    monkeypatch.setitem(connection.settings_dict, "PORT", str(silent.getsockname()[1]))
    try:
        first, second = client.get("/metrics"), client.get("/metrics")
        threads = threading.active_count()
    finally:
        silent.close()  # the stuck read fails now, and its thread ends
        connection.close()
        monkeypatch.undo()

    for response in (first, second):
        assert response.status_code == 200
        samples = samples_of(response.content.decode())
        assert value(samples, "studio_database_up") == 0
        assert ("studio_credits_held", ()) not in samples
        assert b"# TYPE studio_turns_total counter" in response.content  # what the processes counted
    assert threads <= started + 1  # one read stuck on the database, not one per scrape
    # The stuck read ends with its database gone (a loaded machine may take a
    # while to run it); a scrape after that reads the database again.
    concurrent.futures.wait([metrics._database_running], timeout=60)
    assert value(scrape(client), "studio_database_up") == 1


# --- each process's own resources, in multiprocess mode -----------------------------------


def test_a_process_is_named_by_how_it_was_started(monkeypatch):
    monkeypatch.delenv("STUDIO_PROCESS_NAME", raising=False)
    name = process_metrics.process_name

    assert (
        name(["/srv/studio/.venv/bin/daphne", "--proxy-headers", "-b", "127.0.0.1", "-p", "8001", "x"])
        == "web:8001"
    )
    assert name(["/usr/lib/python3/site-packages/daphne/__main__.py", "--port=8002"]) == "web:8002"
    assert name([".venv/bin/celery", "-A", "studio", "worker", "-n", "worker1@%h"]) == "worker1"
    assert name([".venv/bin/celery", "-A", "studio", "beat", "-s", "schedule"]) == "beat"
    monkeypatch.setenv("STUDIO_PROCESS_NAME", "web-blue")
    assert name(["anything"]) == "web-blue"


@pytest.mark.processes
@pytest.mark.skipif(not settings.REDIS_URL, reason="a Celery worker needs its broker")
def test_each_process_reports_its_memory_cpu_and_starts_though_the_metrics_are_summed(tmp_path):
    """prometheus-client's multiprocess mode serves no process collector:
    each process samples itself into the shared directory, by name."""
    shared = tmp_path / "metrics"
    shared.mkdir()
    queue = f"test-{uuid.uuid4().hex[:12]}"
    worker = Worker(tmp_path / "worker.log", queue, PROMETHEUS_MULTIPROC_DIR=str(shared))
    servers, [url] = start_web(tmp_path, 1, PROMETHEUS_MULTIPROC_DIR=str(shared))
    web = f"web:{servers[0].port}"
    try:
        wait_for(lambda: {web, "celery"} <= named(scraped(url), "studio_process_resident_memory_bytes"))
        worker.kill()
        again = Worker(tmp_path / "worker-again.log", queue, PROMETHEUS_MULTIPROC_DIR=str(shared))
        wait_for(lambda: value(scraped(url), "studio_process_starts_total", process="celery") == 2)
        samples = scraped(url)
        again.stop()
    finally:
        worker.stop()
        stop_web(servers)

    for process in (web, "celery"):
        assert value(samples, "studio_process_resident_memory_bytes", process=process) > 20 * 2**20
        assert value(samples, "studio_process_threads", process=process) >= 1
        assert value(samples, "studio_process_open_fds", process=process) >= 3
        assert value(samples, "studio_process_cpu_seconds_total", process=process) > 0
    assert value(samples, "studio_process_starts_total", process=web) == 1


def scraped(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        return samples_of(response.read().decode())


def named(samples: dict, metric: str) -> set[str]:
    return {dict(labels)["process"] for name, labels in samples if name == metric}
