"""Property-based fuzzing of the whole REST API from its own OpenAPI
schema (schemathesis): whatever is sent, no 5xx, and every answer matches
what the schema documents — errors included, in the API's one error shape."""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from agents.services import AgentDefinition, agent_define
from studio.wsgi import application

# Thousands of generated requests: left out of `make test-fast`.
pytestmark = pytest.mark.slow

schema = schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", application)


@pytest.fixture
def fuzz_key(game, admin_key):
    # As Django's test client does: the test's transaction must outlive
    # each request, so requests may not close the connection.
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    agent_define(
        game=game, name="dm", definition=AgentDefinition(memory_enabled=True), by=None, via="command"
    )
    yield admin_key
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


# The definition-time rule (maxOpenTokens below half of maxTokens) ties two
# fields together, which a JSON schema cannot say: a schema-valid definition
# may still be refused there, by design.
# So does an agent file: its blocks, checkpoints and memory changes name
# one another, and an import checks that they agree.
# A replay's blocks must be the agent's, in order and at most 50 apart.
CROSS_FIELD_RULES = {
    ("PUT", "/api/v1/agents/{name}"),
    ("POST", "/api/v1/agents/import"),
    ("POST", "/api/v1/agents/{name}/replays"),
}
# Nor can it say which models a provider serves and the studio prices (a
# game's default model is checked as a definition's model is).
STUDIO_RULES = {("PATCH", "/api/v1/game")}


# Nor can it say that a list's cursor is valid only when the list gave it
# out (a made-up one is a 400), or that `cursor` and the older `after` /
# `before` exclude one another.
def sends_a_cursor(case) -> bool:
    return "cursor" in (case.query or {})


@schema.parametrize()
# derandomize: the same examples every run, so CI is repeatable; raise
# max_examples locally to search wider.
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_the_api_never_fails_and_keeps_to_its_schema(case, fuzz_key):
    headers = {"Authorization": f"Bearer {fuzz_key}"}
    response = case.call(headers=headers)
    case.validate_response(response, excluded_checks=_excluded(case, response), headers=headers)


def _excluded(case, response) -> list:
    excluded = []
    if (case.method, case.path) in CROSS_FIELD_RULES | STUDIO_RULES or sends_a_cursor(case):
        excluded.append(positive_data_acceptance)
    if response.status_code == 413:
        # A body past STUDIO_MAX_BODY_BYTES, refused unread: a rejection
        # (schemathesis's list of them leaves 413 out).
        excluded.append(negative_data_rejection)
    return excluded


class StudioKey:
    """The fuzzing test's key, as schemathesis's auth: calls carry it, and
    its auth checks know it for the valid one."""

    key = ""

    def get(self, case, context):
        return self.key

    def set(self, case, data, context):
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


class Stateful(schema.as_state_machine()):
    """Sequences of calls, each using what an earlier one answered (a
    Location, an agent's name, a turn's id)."""

    def validate_response(self, response, case, additional_checks=(), **kwargs):
        case.validate_response(response, excluded_checks=_excluded(case, response))


def test_sequences_of_calls_never_fail_and_keep_to_the_schema(fuzz_key):
    StudioKey.key = fuzz_key
    schema.auth()(StudioKey)
    Stateful.run(
        settings=settings(
            max_examples=20,
            deadline=None,
            derandomize=True,
            stateful_step_count=6,
            suppress_health_check=list(HealthCheck),
        )
    )
