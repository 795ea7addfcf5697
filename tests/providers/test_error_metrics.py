"""Failed model calls are counted in `studio_model_call_errors_total` by
provider and kind — the class of the status a provider refused with, a
timeout, a server out of reach, an answer that broke off — turns and
compactions alike, against the loopback fakes driven by the real SDKs."""

import pytest

from agents.compaction import compaction_request, compaction_run_with_retries
from agents.models import CompactionReason, CompactionStatus, TurnStatus
from agents.providers.base import ProviderError, status_public
from studio.ops import metrics
from tests.support import fake_anthropic
from tests.support.fake_openai import completion, error
from tests.support.metrics import Moves, samples_of
from tests.support.sending import turn_send

OPENAI, ANTHROPIC = "openai:gpt-test", "anthropic:claude-test"


def scrape() -> dict:
    return samples_of(metrics.metrics_text().decode())


def errors_moved(before: dict, provider: str) -> dict:
    """{kind: how much it moved} for the provider's failed calls."""
    after = scrape()
    moved = Moves(before, after)
    kinds = {dict(labels)["kind"] for name, labels in after if name == "studio_model_call_errors_total"}
    counts = {kind: moved("studio_model_call_errors_total", provider=provider, kind=kind) for kind in kinds}
    return {kind: count for kind, count in counts.items() if count}


@pytest.mark.parametrize(
    "answer, kind",
    [
        (error(503, "Overloaded."), "5xx"),
        (error(429, "Slow down.", type="rate_limit_error"), "429"),
        (error(401, "Bad key.", type="invalid_request_error"), "4xx"),
    ],
    ids=["5xx", "429", "4xx"],
)
def test_a_call_the_provider_refused_counts_under_its_status(define, fake_openai, studio_conf, answer, kind):
    studio_conf(MODEL_MAX_RETRIES=0)
    agent = define("dm", model=OPENAI)
    fake_openai.push(answer)
    before = scrape()

    turn = turn_send(agent=agent, content="Hello")

    assert turn.status == TurnStatus.FAILED
    assert errors_moved(before, "openai") == {kind: 1}


def test_a_call_that_timed_out_counts_as_a_timeout(define, fake_openai, studio_conf):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, MODEL_MAX_RETRIES=0)
    agent = define("dm", model=OPENAI)
    fake_openai.push(completion("Too late.", delay=3))
    before = scrape()

    turn_send(agent=agent, content="Quick!")

    assert errors_moved(before, "openai") == {"timeout": 1}


def test_a_server_out_of_reach_counts_as_unreachable(define, settings, studio_conf):
    settings.OPENAI_BASE_URL = "http://127.0.0.1:1/v1"
    studio_conf(MODEL_MAX_RETRIES=0)
    agent = define("dm", model=OPENAI)
    before = scrape()

    turn_send(agent=agent, content="Anyone there?")

    assert errors_moved(before, "openai") == {"unreachable": 1}


def test_an_answer_that_broke_off_counts_as_broken_off(define, fake):
    agent = define("dm", model=ANTHROPIC)
    fake.push(fake_anthropic.message(fake_anthropic.text("The ferryman waits by the water."), cut_after=4))
    before = scrape()

    turn_send(agent=agent, content="Who is there?")

    assert errors_moved(before, "anthropic") == {"broke_off": 1}


def test_a_compactions_failed_call_counts_too(define, fake, studio_conf):
    studio_conf(MODEL_MAX_RETRIES=0, COMPACTION_RUNNER="none", COMPACTION_MAX_ATTEMPTS=1)
    agent = define("dm", model=ANTHROPIC)
    for content in ("Remember the bells.", "And the ferryman."):
        fake.push(fake_anthropic.message(fake_anthropic.text("Noted.")))
        turn_send(agent=agent, content=content)
    fake.push(fake_anthropic.error(529, "overloaded_error", "Overloaded."))
    pending = compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    before = scrape()

    compaction_run_with_retries(str(pending.uuid))

    pending.refresh_from_db()
    assert pending.status == CompactionStatus.FAILED
    assert errors_moved(before, "anthropic") == {"5xx": 1}


@pytest.mark.parametrize(
    "public, kind",
    [
        (status_public(502), "5xx"),
        (status_public(429), "429"),
        (status_public(404), "4xx"),
        ("the model provider could not be reached", "unreachable"),
        ("this studio is not set up to reach the model's provider", "unconfigured"),
        ("the model's answer could not be read", "unreadable"),
        ("the compactor's answer was cut off at its output limit", "other"),
    ],
)
def test_each_failure_is_one_of_a_few_kinds(public, kind):
    assert ProviderError("what the server said", public=public).kind == kind
