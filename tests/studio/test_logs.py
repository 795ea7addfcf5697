"""Every request has an id — the client's X-Request-ID when it is sane —
echoed on the response and carried by the lines logged while it runs,
with the game, agent, turn or compaction the studio works on;
STUDIO_LOG_FORMAT=json writes them one JSON object per line. How turns and
compactions end is logged at a level an operator filters on: failures at
WARNING, with their code. (tests/scale reads such lines from a Daphne
process configured by the environment; tests/agents/test_celery.py from a
Celery worker.)"""

import logging
import runpy

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.support.logs import json_lines_logged
from tests.support.settings import SETTINGS_FILE

from ..conftest import script, wait_for


@pytest.fixture
def json_log():
    """Lines logged (INFO and up) during the test, parsed."""
    yield from json_lines_logged(logging.INFO)


@pytest.fixture
def default_level_log():
    """Lines logged during the test at the default STUDIO_LOG_LEVEL
    (WARNING and up), parsed."""
    yield from json_lines_logged(logging.WARNING)


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
    [line] = [line for line in json_log() if line["logger"] == "agents.sending.turn_slot"]
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
    assert not {"request_id", "game", "agent", "turn", "compaction"} & set(line)


def lines_of(lines: list[dict], logger: str) -> list[dict]:
    return [line for line in lines if line["logger"] == logger]


@pytest.mark.django_db(transaction=True)
def test_a_failed_turn_is_logged_at_warning_with_its_error_code(send, agent, json_log):
    turn = send(script({"fail": "the model is down"}))

    [line] = lines_of(json_log(), "agents.sending.turn_slot")
    assert line["level"] == "WARNING"
    assert line["message"].startswith(f"turn {turn['id']} ended failed (model_error) after ")


@pytest.mark.django_db(transaction=True)
def test_a_provider_outage_shows_at_the_default_level_with_each_turns_error_code(
    send, agent, default_level_log
):
    failed = [send(script({"fail": "connection refused"}))["id"] for _ in range(2)]
    send("hello")

    lines = default_level_log()
    for turn_id in failed:
        # The engine's line with what the provider said, and the turn's end with its code.
        [call, end] = [line for line in lines if line.get("turn") == turn_id]
        assert (call["logger"], call["level"]) == ("agents.sending.engine", "WARNING")
        assert "connection refused" in call["message"]
        assert (end["level"], end["message"].split(" after ")[0]) == (
            "WARNING",
            f"turn {turn_id} ended failed (model_error)",
        )
    assert len(lines) == 4  # the completed turn is not among them


@pytest.mark.django_db(transaction=True)
def test_a_compaction_done_is_logged_at_info_with_the_request_game_agent_and_compaction(
    api, send, agent, json_log
):
    send("m1")
    send("m2")

    response = api.post("/api/v1/agents/dm/compact", HTTP_X_REQUEST_ID="req-compact-1")

    compaction = response.json()["compaction"]
    assert compaction["status"] == "done"
    [line] = lines_of(json_log(), "agents.compaction")
    assert line["level"] == "INFO"
    assert line["message"].startswith(f"compaction {compaction['id']} done (manual, attempt 1): ")
    assert (line["request_id"], line["game"], line["agent"], line["compaction"]) == (
        "req-compact-1",
        "ashmere",
        "dm",
        compaction["id"],
    )
    assert "turn" not in line


@pytest.mark.django_db(transaction=True)
def test_each_failed_compaction_attempt_and_its_failure_for_good_are_logged_at_warning(
    api, send, agent, json_log, studio_conf
):
    studio_conf(COMPACTION_MAX_ATTEMPTS=2)
    send("@compactor-fail the compactor is down")
    send("m2")

    compaction = api.post("/api/v1/agents/dm/compact").json()["compaction"]

    lines = lines_of(json_log(), "agents.compaction")
    assert compaction["status"] == "failed"
    assert [line["level"] for line in lines] == ["WARNING", "WARNING", "WARNING"]
    assert all(line["compaction"] == compaction["id"] and line["agent"] == "dm" for line in lines)
    assert "the model call failed: the compactor is down" in lines[0]["message"]
    assert lines[-1]["message"] == (
        f"compaction {compaction['id']} failed for good after 2 attempts: {compaction['error']}"
    )


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


@pytest.mark.django_db(transaction=True)
def test_a_compaction_run_in_a_thread_of_the_web_process_names_the_request_that_queued_it(
    api, send, agent, json_log, studio_conf
):
    studio_conf(COMPACTION_RUNNER="thread")
    send("m1")
    send("m2")

    compaction = api.post("/api/v1/agents/dm/compact", HTTP_X_REQUEST_ID="req-thread-1").json()["compaction"]

    wait_for(lambda: lines_of(json_log(), "agents.compaction"))
    [line] = lines_of(json_log(), "agents.compaction")
    assert line["message"].startswith(f"compaction {compaction['id']} done")
    assert (line["request_id"], line["compaction"]) == ("req-thread-1", compaction["id"])


@pytest.mark.django_db(transaction=True)
def test_a_send_run_in_the_background_logs_under_its_requests_id(api, agent, json_log):
    response = api.post(
        "/api/v1/agents/dm/messages",
        {"content": "hello", "wait": False},
        format="json",
        HTTP_X_REQUEST_ID="req-background-1",
    )

    turn_id = response.json()["turn"]["id"]
    wait_for(lambda: lines_of(json_log(), "agents.sending.turn_slot"))
    [line] = lines_of(json_log(), "agents.sending.turn_slot")
    assert (line["request_id"], line["turn"]) == ("req-background-1", turn_id)
