"""Operating several processes: two Daphne web processes sharing one
PROMETHEUS_MULTIPROC_DIR serve the same sums whichever is scraped, a
process that dies without a word stops counting in the gauges, and with
STUDIO_LOG_FORMAT=json a process configured by its environment writes one
JSON object per line, with the request's id and the turn's ids — and its
access log's line for the request."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from billing.models import CostLine
from tests.support.api import request
from tests.support.metrics import Moves, samples_of, value
from tests.support.web import start_web, stop_web

from ..conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) between the processes"),
]

COUNTS_THEN_HANGS = textwrap.dedent(
    """
    import os, time
    import django
    os.environ["DJANGO_SETTINGS_MODULE"] = "studio.settings"
    django.setup()
    from studio.ops import metrics
    metrics.ws_connected()
    metrics.send_queued()
    print("counted", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture(scope="module")
def metrics_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("metrics")


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory, metrics_dir):
    """Two Daphne processes counting into one directory and logging JSON;
    yields their URLs and the folder of their logs."""
    logs = tmp_path_factory.mktemp("web")
    processes, urls = start_web(
        logs,
        2,
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        STUDIO_LOG_FORMAT="json",
        STUDIO_LOG_LEVEL="INFO",
    )
    yield urls, logs
    stop_web(processes)


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        return samples_of(response.read().decode())


def test_a_scrape_of_either_process_sums_the_turns_of_both(web, define, designer_key):
    urls, _ = web
    define("dm")
    before = [scrape(url) for url in urls]

    for url in [urls[0]] * 3 + [urls[1]] * 2:
        assert request("POST", f"{url}/api/v1/agents/dm/messages", designer_key, {"content": "hi"})[0] == 200
    moved = [Moves(earlier, scrape(url)) for earlier, url in zip(before, urls, strict=True)]

    charged = float(sum(line.amount for line in CostLine.objects.filter(kind="model")))
    for each in moved:
        assert each("studio_turns_total", status="completed", errorCode="") == 5
        assert each("studio_model_call_seconds_count", provider="scripted") == 5
        assert each("studio_credits_charged_total", kind="model") == pytest.approx(charged)


def test_a_process_that_dies_without_a_word_stops_counting_in_the_gauges(web, metrics_dir):
    urls, _ = web
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    process = subprocess.Popen(
        [sys.executable, "-c", COUNTS_THEN_HANGS], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline().strip() == "counted"
        during = scrape(urls[0])
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    after = scrape(urls[1])

    assert value(during, "studio_ws_connections") == value(during, "studio_sends_queued") == 1
    assert value(after, "studio_ws_connections") == value(after, "studio_sends_queued") == 0


def test_a_json_log_line_of_a_process_carries_the_request_and_turn_ids(web, define, designer_key):
    urls, logs = web
    define("dm")
    body = json.dumps({"content": "hello"}).encode()
    sent = urllib.request.Request(f"{urls[1]}/api/v1/agents/dm/messages", data=body, method="POST")
    sent.add_header("Authorization", f"Bearer {designer_key}")
    sent.add_header("Content-Type", "application/json")
    sent.add_header("X-Request-ID", "scale-req-1")

    with urllib.request.urlopen(sent, timeout=30) as response:
        echoed, turn_id = response.headers["X-Request-ID"], json.load(response)["turn"]["id"]
    lines = lambda: [  # noqa: E731
        json.loads(text) for text in (logs / "web1.log").read_text().splitlines() if "scale-req-1" in text
    ]
    wait_for(lambda: len(lines()) == 2)
    line, access = lines()

    assert echoed == "scale-req-1"
    assert line["logger"] == "agents.sending.turn_slot" and line["level"] == "INFO"
    assert line["message"].startswith(f"turn {turn_id} ended completed")
    assert (line["request_id"], line["game"], line["agent"], line["turn"]) == (
        "scale-req-1",
        "ashmere",
        "dm",
        turn_id,
    )
    assert line["time"].endswith("+00:00")
    # Then the request's line in the studio's access log.
    assert access["logger"] == "studio.access"
    assert {key: access[key] for key in ("method", "path", "status", "client", "request_id")} == {
        "method": "POST",
        "path": "/api/v1/agents/dm/messages",
        "status": 200,
        "client": "127.0.0.1",
        "request_id": "scale-req-1",
    }
