"""The studio retries a model call itself, with the SDKs' policy (408, 409,
429, 5xx, timeouts, dropped connections; backoff with jitter, or the wait
the server asks for, capped), so each attempt the provider could bill is
reported for the engine to charge: `failed_attempts` on the reply, on the
error, on an abandoned call's end — for model steps and compactions, with
both providers, through their SDKs against the loopback fakes. Backoffs
are instant here (the `backoff` fixture records what was asked for)."""

import email.utils
import time

import pytest

from agents.providers import provider_for, retries
from agents.providers.anthropic_messages import COMPACTOR_SYSTEM
from agents.providers.base import (
    Cancelled,
    CompactionRequest,
    Control,
    ModelRequest,
    ProviderError,
    Usage,
)
from agents.providers.prompts import COMPACTOR_INSTRUCTIONS, compaction_prompt
from agents.providers.retries import retry_after, retry_delay
from studio.tokens import count_tokens
from tests.support.providers import NoControl

from ..conftest import wait_for

SENT = 42  # what the studio counted of a step's input: what a failed attempt bills


def step_request() -> ModelRequest:
    messages = [{"role": "user", "content": "Who is there?"}]
    return ModelRequest(
        system="You are the ferryman.", context_block=None, messages=messages, tools=[], input_tokens=SENT
    )


def compaction_request() -> CompactionRequest:
    return CompactionRequest(
        system="You are the ferryman.",
        previous_summary=None,
        messages=[{"role": "user", "content": "I pay the ferryman."}],
        open_memories=[],
    )


def compaction_sent(model: str) -> int:
    """A compaction's input as the studio counts it: its instructions (each
    provider's own words) and its prompt."""
    instructions = COMPACTOR_SYSTEM if model.startswith("anthropic:") else COMPACTOR_INSTRUCTIONS
    return count_tokens(instructions) + count_tokens(compaction_prompt(compaction_request()))


def retry_counts(provider) -> list[str]:
    headers = [r.headers if hasattr(r, "headers") else r["headers"] for r in provider.fake.requests]
    return [{k.lower(): v for k, v in h.items()}["x-stainless-retry-count"] for h in headers]


def complete(provider):
    return provider_for(provider.model).complete(step_request(), NoControl())


# --- the policy -------------------------------------------------------------------------------


def test_a_retry_backs_off_exponentially_with_jitter_or_waits_what_it_is_asked_up_to_a_cap():
    assert 0.375 <= retry_delay(0) <= 0.5
    assert 0.75 <= retry_delay(1) <= 1.0
    assert 6.0 <= retry_delay(10) <= 8.0  # never more than MAX_RETRY_SECONDS
    assert retry_delay(3, after=2.5) == 2.5
    assert retry_delay(0, after=3600) == retries.RETRY_AFTER_MAX_SECONDS == 60
    assert 0.375 <= retry_delay(0, after=0) <= 0.5  # no wait asked for: the backoff


def test_the_wait_asked_for_is_read_from_any_of_its_headers():
    assert retry_after({"retry-after-ms": "250"}) == 0.25
    assert retry_after({"retry-after": "2"}) == 2.0
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8 <= retry_after({"retry-after": in_ten}) <= 10
    assert retry_after({}) is None and retry_after(None) is None


# --- model steps ------------------------------------------------------------------------------


def test_refusals_worth_retrying_are_retried_and_bill_nothing(provider, studio_conf, backoff):
    studio_conf(MODEL_MAX_RETRIES=3)
    provider.push(provider.refuse(429), provider.refuse(503), provider.refuse(408), provider.say("At last."))

    reply = complete(provider)

    assert reply.text == "At last."
    assert retry_counts(provider) == ["0", "1", "2", "3"]  # numbered as the SDKs number theirs
    assert reply.failed_attempts == []  # a refusal is not billed
    assert len(backoff) == 3


def test_a_refusal_not_worth_retrying_is_not_retried(provider, studio_conf):
    provider.push(provider.refuse(400), provider.say("Never asked."))

    with pytest.raises(ProviderError) as failed:
        complete(provider)

    assert len(provider.fake.requests) == 1
    assert (failed.value.reached, failed.value.failed_attempts) == (False, [])


def test_a_server_that_says_whether_to_retry_is_obeyed(provider):
    provider.push(provider.refuse(400, headers={"x-should-retry": "true"}), provider.say("Asked again."))
    assert complete(provider).text == "Asked again."

    provider.push(provider.refuse(503, headers={"x-should-retry": "false"}), provider.say("Never asked."))
    with pytest.raises(ProviderError):
        complete(provider)

    assert len(provider.fake.requests) == 3


def test_each_attempt_that_timed_out_is_reported_for_what_it_bills(provider, studio_conf):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, MODEL_MAX_RETRIES=2)
    provider.push(
        provider.say("Too late.", delay=3), provider.say("Too late.", delay=3), provider.say("In time.")
    )

    reply = complete(provider)

    assert reply.text == "In time."
    assert reply.usage == Usage(input_tokens=100, output_tokens=20)
    assert reply.failed_attempts == [Usage(input_tokens=SENT)] * 2


def test_a_call_whose_every_attempt_timed_out_reports_all_but_its_own(provider, studio_conf, caplog):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, MODEL_MAX_RETRIES=1)
    provider.fake.always(provider.say("Too late.", delay=3))

    with pytest.raises(ProviderError) as failed:
        complete(provider)

    # The last attempt is the error's own (reached: the engine charges it).
    assert (failed.value.reached, failed.value.failed_attempts) == (True, [Usage(input_tokens=SENT)])
    assert ("after 1 retry" if provider.model.startswith("openai:") else "(tried 2 times)") in str(
        failed.value
    )


def test_a_server_never_reached_is_retried_and_bills_nothing(provider, settings, studio_conf):
    if provider.model.startswith("openai:"):
        settings.OPENAI_BASE_URL = "http://127.0.0.1:1/v1"
    else:
        settings.ANTHROPIC_BASE_URL = "http://127.0.0.1:1"
    studio_conf(MODEL_MAX_RETRIES=2)

    with pytest.raises(ProviderError) as failed:
        complete(provider)

    assert (failed.value.reached, failed.value.failed_attempts) == (False, [])
    assert ("after 2 retries" if provider.model.startswith("openai:") else "(tried 3 times)") in str(
        failed.value
    )


class CancelWhen(Control):
    """A turn cancelled once `condition()` holds."""

    def __init__(self, condition):
        self.condition = condition

    def check(self) -> None:
        if self.condition():
            raise Cancelled()

    def sleep(self, seconds: float) -> None:
        self.check()


def test_a_call_abandoned_while_it_backs_off_is_not_tried_again(provider, monkeypatch):
    monkeypatch.setattr(retries, "backoff_wait", lambda abandoned, seconds: abandoned.wait(10))
    provider.push(provider.refuse(503), provider.say("Nobody reads this."))
    control = CancelWhen(lambda: provider.fake.answered == [503])

    with pytest.raises(Cancelled) as stopped:
        provider_for(provider.model).complete(step_request(), control)
    ends = []
    stopped.value.call.when_ended(ends.append)
    wait_for(lambda: ends)

    assert len(provider.fake.requests) == 1
    ((usage, reached, _text, failed),) = [(e.usage, e.reached, e.text, e.failed_attempts) for e in ends]
    assert (usage, reached, failed) == (None, False, ())  # refused, and nothing billed


def test_an_abandoned_call_ends_with_the_attempts_it_failed_billed(provider, studio_conf):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, MODEL_MAX_RETRIES=2)
    provider.push(provider.say("Too late.", delay=3), provider.say("Read after the cancel.", delay=0.2))
    control = CancelWhen(lambda: len(provider.fake.requests) == 2)

    with pytest.raises(Cancelled) as stopped:
        provider_for(provider.model).complete(step_request(), control)
    ends = []
    stopped.value.call.when_ended(ends.append)
    wait_for(lambda: ends)

    (end,) = ends
    assert end.usage == Usage(input_tokens=100, output_tokens=20)
    assert end.failed_attempts == (Usage(input_tokens=SENT),)
    assert len(provider.fake.requests) == 2


# --- compactions ------------------------------------------------------------------------------


def test_a_compaction_retries_and_reports_each_attempt_that_timed_out(provider, studio_conf):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, MODEL_MAX_RETRIES=2)
    provider.push(provider.refuse(429), provider.checkpoint("Paid.", delay=3), provider.checkpoint("Paid."))

    reply = provider_for(provider.model).summarize(compaction_request())

    assert reply.summary == "Paid."
    assert len(provider.fake.requests) == 3
    # The refusal bills nothing; the timeout bills the input sent, counted here.
    assert reply.failed_attempts == [Usage(input_tokens=compaction_sent(provider.model))]


def test_a_compaction_that_keeps_timing_out_reports_its_attempts_on_the_error(provider, studio_conf):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.5, MODEL_MAX_RETRIES=1)
    provider.fake.always(provider.checkpoint("Paid.", delay=3))

    with pytest.raises(ProviderError) as failed:
        provider_for(provider.model).summarize(compaction_request())

    assert failed.value.reached
    assert failed.value.failed_attempts == [Usage(input_tokens=compaction_sent(provider.model))]
