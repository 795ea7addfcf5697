"""Every request has an id — the client's X-Request-ID when it is sane —
echoed on the response and carried by the lines logged while it runs,
with the game, agent and turn the engine works on; STUDIO_LOG_FORMAT=json
writes them one JSON object per line. (tests/scale reads such lines from a
Daphne process configured by the environment.)"""

import io
import json
import logging
import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from studio.logs import ContextFilter, JsonFormatter

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "studio" / "settings.py"


@pytest.fixture
def json_log():
    """Lines logged (INFO and up) during the test, as the JSON handler
    writes them, parsed."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)
    root.setLevel(level)


def test_a_request_without_an_id_gets_a_new_one_on_its_response(client):
    first, second = client.get("/healthz"), client.get("/healthz")

    assert len(first["X-Request-ID"]) == 32
    assert first["X-Request-ID"] != second["X-Request-ID"]


def test_a_request_with_a_sane_id_gets_it_back(client):
    response = client.get("/healthz", HTTP_X_REQUEST_ID="lb-7f3a:9c21/01")

    assert response["X-Request-ID"] == "lb-7f3a:9c21/01"


@pytest.mark.parametrize("given", ["two words", "x" * 201, "caf\u00e9", "line\tbreak", ""])
def test_a_request_with_an_id_that_is_not_sane_gets_a_new_one(client, given):
    response = client.get("/healthz", HTTP_X_REQUEST_ID=given)

    assert response["X-Request-ID"] != given
    assert len(response["X-Request-ID"]) == 32


def test_a_refused_request_is_logged_with_its_request_id(db, client, json_log):
    client.get("/api/v1/nothing-here", HTTP_X_REQUEST_ID="req-404")

    [line] = [line for line in json_log() if line["logger"] == "django.request"]
    assert line["request_id"] == "req-404"
    assert line["level"] == "WARNING"
    assert line["message"] == "Not Found: /api/v1/nothing-here"
    assert {"time", "level", "logger", "message"} <= set(line)


@pytest.mark.django_db(transaction=True)
def test_a_turns_log_line_carries_the_request_game_agent_and_turn(api, agent, json_log):
    response = api.post(
        "/api/v1/agents/dm/messages", {"content": "hello"}, format="json", HTTP_X_REQUEST_ID="req-turn-1"
    )

    turn_id = response.json()["turn"]["id"]
    [line] = [line for line in json_log() if line["logger"] == "agents.turn_slot"]
    assert line["message"].startswith(f"turn {turn_id} ended completed")
    assert (line["request_id"], line["game"], line["agent"], line["turn"]) == (
        "req-turn-1",
        "ashmere",
        "dm",
        turn_id,
    )


def test_a_line_logged_outside_any_request_or_turn_names_none(json_log):
    logging.getLogger("studio.test").warning("on its own")

    [line] = json_log()
    assert line["message"] == "on its own"
    assert not {"request_id", "game", "agent", "turn"} & set(line)


def test_a_line_logged_after_a_request_has_ended_names_no_request(client, json_log):
    client.get("/healthz", HTTP_X_REQUEST_ID="req-done")
    logging.getLogger("studio.test").warning("between requests")

    [line] = json_log()
    assert "request_id" not in line


def test_an_exception_is_kept_in_its_json_line(json_log):
    try:
        raise ValueError("the why")
    except ValueError:
        logging.getLogger("studio.test").exception("it broke")

    [line] = json_log()
    assert "ValueError: the why" in line["exception"]


def console_formatter(monkeypatch, **env) -> str:
    """The formatter of the console handler, the settings read afresh under `env`."""
    monkeypatch.delenv("STUDIO_LOG_FORMAT", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))["LOGGING"]["handlers"]["console"]["formatter"]


def test_the_log_format_is_plain_text_unless_json_is_asked_for(monkeypatch):
    assert console_formatter(monkeypatch) == "text"
    assert console_formatter(monkeypatch, STUDIO_LOG_FORMAT="json") == "json"


def test_an_unknown_log_format_stops_start_up_saying_so(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match="STUDIO_LOG_FORMAT"):
        console_formatter(monkeypatch, STUDIO_LOG_FORMAT="yaml")
