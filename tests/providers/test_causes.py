"""A failed model call, as a designer reads it: its class and the
provider's own words, with the operator's secrets and addresses taken out
— on the agent page, over the API, and whole only in the log. Against the
loopback OpenAI and Anthropic servers, through the official SDKs."""

import re

import pytest

from agents.models import TurnStatus
from agents.providers.causes import CAUSES, scrub, status_cause, words
from tests.conftest import page_user
from tests.support import fake_anthropic
from tests.support import fake_openai as openai_answers
from tests.support.sending import turn_send

from .conftest import failure_logged

SECRET_KEY = "sk-proj-Zq81secretKEYabcdef123456"
# What providers say, secrets and all, as their real error bodies do.
OPENAI_401 = (
    f"Incorrect API key provided: {SECRET_KEY}. You can find your API key at "
    "https://platform.openai.com/account/api-keys."
)
OPENAI_429 = (
    "Rate limit reached for gpt-test in organization org-Abc123Def456 on tokens per min (TPM): "
    "Limit 30000, Used 29500, Requested 2000. Please try again in 2s. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)
OPENAI_404 = "The model `gpt-test` does not exist or you do not have access to it."
OPENAI_400 = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9021 "
    "tokens. Please reduce the length of the messages."
)
OPENAI_500 = "The server had an error while processing your request (upstream api.internal.example.net:8443)."

OPENAI_CASES = {
    "auth_refused": openai_answers.error(
        401, OPENAI_401, type="invalid_request_error", code="invalid_api_key"
    ),
    "rate_limited": openai_answers.error(429, OPENAI_429, type="tokens", code="rate_limit_exceeded"),
    "quota_exhausted": openai_answers.error(
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        code="insufficient_quota",
    ),
    "model_not_found": openai_answers.error(
        404, OPENAI_404, type="invalid_request_error", code="model_not_found"
    ),
    "context_too_long": openai_answers.error(
        400, OPENAI_400, type="invalid_request_error", code="context_length_exceeded"
    ),
    "provider_down": openai_answers.error(500, OPENAI_500),
    "output_refused": openai_answers.completion(None, finish_reason="content_filter"),
}
ANTHROPIC_CASES = {
    "auth_refused": fake_anthropic.error(401, "authentication_error", f"invalid x-api-key: {SECRET_KEY}"),
    "rate_limited": fake_anthropic.error(
        429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."
    ),
    "model_not_found": fake_anthropic.error(404, "not_found_error", "model: claude-test"),
    "context_too_long": fake_anthropic.error(
        400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
    ),
    "provider_down": fake_anthropic.error(529, "overloaded_error", "Overloaded"),
    "output_refused": fake_anthropic.message(stop_reason="refusal"),
}
# What the designer is told the provider said (scrubbed), when it said anything.
OPENAI_SAID = {
    "auth_refused": "Incorrect API key provided: [key]. You can find your API key at [address]",
    "rate_limited": "in organization [account] on tokens per min",
    "model_not_found": OPENAI_404,
    "context_too_long": "maximum context length is 8192 tokens",
    "provider_down": "(upstream [address])",
}
ANTHROPIC_SAID = {
    "auth_refused": "invalid x-api-key: [key]",
    "context_too_long": "prompt is too long: 210000 tokens > 200000 maximum",
}


def fail_once(agent, fake, answer, settings, key_setting):
    """One send that fails with `answer`, the studio's key for the
    provider (`key_setting`) being a secret no designer may read."""
    setattr(settings, key_setting, SECRET_KEY)
    settings.STUDIO = {**settings.STUDIO, "MODEL_MAX_RETRIES": 0}
    fake.always(answer)
    return turn_send(agent=agent, content="I push open the chapel door.")


def assert_told_safely(turn, cause: str, said: str | None, *, base_url: str) -> None:
    assert turn.status == TurnStatus.FAILED
    assert turn.error_class == cause
    assert CAUSES[cause][1] in turn.error  # what it means and who acts
    if said:
        assert "The provider said: “" in turn.error and said in turn.error
    for secret in (SECRET_KEY, "sk-proj", base_url, "127.0.0.1", "openai.com", "org-Abc123", "example.net"):
        assert secret not in turn.error


@pytest.mark.parametrize("cause", list(OPENAI_CASES))
def test_openai_failures_are_told_by_class_with_the_providers_words_scrubbed(
    define, fake_openai, settings, caplog, cause
):
    agent = define("dm", model="openai:gpt-test")

    turn = fail_once(agent, fake_openai, OPENAI_CASES[cause], settings, "OPENAI_API_KEY")

    assert_told_safely(turn, cause, OPENAI_SAID.get(cause), base_url=fake_openai.base_url)
    logged = failure_logged(caplog, turn)
    if cause == "auth_refused":
        assert SECRET_KEY in logged  # whole, for the operator only


@pytest.mark.parametrize("cause", list(ANTHROPIC_CASES))
def test_anthropic_failures_are_told_by_class_with_the_providers_words_scrubbed(
    define, fake, settings, cause
):
    agent = define("dm", model="anthropic:claude-test")

    turn = fail_once(agent, fake, ANTHROPIC_CASES[cause], settings, "ANTHROPIC_API_KEY")

    assert_told_safely(turn, cause, ANTHROPIC_SAID.get(cause), base_url=fake.url)


def test_the_api_and_the_page_show_the_class_and_the_scrubbed_words(
    define, fake_openai, settings, api, client, game
):
    agent = define("dm", model="openai:gpt-test")
    turn = fail_once(agent, fake_openai, OPENAI_CASES["auth_refused"], settings, "OPENAI_API_KEY")
    client.force_login(page_user("mara", game))

    answered = api.get(f"/api/v1/agents/dm/turns/{turn.uuid}").json()["turn"]
    page = client.get("/studio/ashmere/agents/dm/").content.decode()

    assert (answered["errorCode"], answered["errorClass"]) == ("model_error", "auth_refused")
    assert answered["error"] == turn.error
    assert 'data-error-class="auth_refused"' in page
    assert re.search(r"data-error-class=\"auth_refused\"[^>]*>\s*auth refused", page)
    assert "Incorrect API key provided: [key]" in page
    assert SECRET_KEY not in page and fake_openai.base_url not in page
    assert "operators can find the details" not in page


def test_a_failure_the_studio_cannot_class_keeps_its_old_words(define, fake_openai, settings):
    agent = define("dm", model="openai:gpt-test")

    turn = fail_once(
        agent, fake_openai, openai_answers.raw(200, "this is not JSON"), settings, "OPENAI_API_KEY"
    )

    assert turn.error_class == "answer_unreadable"
    assert "could not be read" in turn.error and "this is not JSON" not in turn.error


# --- the pieces -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "said", "cause"),
    [
        (401, "invalid_api_key", "auth_refused"),
        (403, "permission_error", "auth_refused"),
        (429, "rate_limit_exceeded", "rate_limited"),
        (429, "insufficient_quota You exceeded your current quota", "quota_exhausted"),
        (404, "", "model_not_found"),
        (400, "model_not_found The model `x` does not exist", "model_not_found"),
        (400, "context_length_exceeded", "context_too_long"),
        (413, "request_too_large", "context_too_long"),
        (400, "content_filter The response was filtered", "output_refused"),
        (400, "invalid_request_error temperature must be below 2", "request_refused"),
        (500, "", "provider_down"),
        (529, "overloaded_error", "provider_down"),
        (408, "", "provider_timeout"),
        # An error event in a stream that began with 200.
        (200, "overloaded_error Overloaded", "provider_down"),
        (200, "rate_limit_error Slow down", "rate_limited"),
        (200, "invalid_request_error", "request_refused"),
    ],
)
def test_a_refusal_is_classed_by_its_status_and_words(status, said, cause):
    assert status_cause(status, said) == cause


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("Incorrect API key provided: sk-abc***************wxyz.", "sk-abc"),
        ("invalid x-api-key: sk-ant-api03-AbCdEf0123456789", "sk-ant"),
        ("Authorization: Bearer abc.def.ghi was refused", "abc.def.ghi"),
        ("GET /v1/models?key=AIzaSyD-secret-123&alt=json failed", "AIzaSyD"),
        ('{"api_key": "hunter22"} is wrong', "hunter22"),
        ("See https://platform.openai.com/account/api-keys.", "platform.openai.com"),
        ("upstream 10.0.3.7:8443 timed out", "10.0.3.7"),
        ("upstream llm-gateway.corp.internal refused", "llm-gateway"),
        ("connect to localhost:11434 failed", "11434"),
        ("in organization org-Abc123Def456 on tokens", "Abc123Def456"),
    ],
)
def test_scrubbing_takes_out_keys_addresses_and_account_names(text, hidden):
    assert hidden not in scrub(text)


def test_scrubbing_takes_out_the_studios_own_settings(settings):
    settings.OPENAI_BASE_URL = "http://gateway:8080/v1"
    settings.OPENAI_API_KEY = "plain-secret-without-a-prefix"

    said = scrub("bad key plain-secret-without-a-prefix for http://gateway:8080/v1 (gateway:8080)")

    assert "plain-secret" not in said and "gateway" not in said


def test_the_providers_words_keep_their_meaning_and_are_bounded():
    assert words("The model `gpt-4.1-mini` does not exist.") == "The model `gpt-4.1-mini` does not exist."
    assert words("<html><body><h1>502 Bad Gateway</h1></body></html>") == "502 Bad Gateway"
    assert len(words("x" * 5000)) == 300
    assert words(None) == ""
