"""A model step's output limit: `ModelRequest.max_output_tokens`, else
STUDIO_MODEL_MAX_OUTPUT_TOKENS — what both real providers send as their
limit, and where the scripted model cuts its reply (so the engine can ask
for a last call that fits in what a turn still holds)."""

import json

import pytest

from agents.providers import provider_for
from agents.providers.anthropic_messages import AnthropicProvider
from agents.providers.base import ModelRequest, ProviderError
from agents.providers.scripted import ScriptedProvider
from studio.tokens import count_tokens
from tests.support import fake_anthropic
from tests.support.providers import NoControl

SAY = "The ferryman lifts his lantern, counts the coins twice, and points across the black water. " * 20


def request_for(content: str = "Who is there?", **fields) -> ModelRequest:
    messages = [{"role": "user", "content": content}]
    return ModelRequest(system="", context_block=None, messages=messages, tools=[], **fields)


def _sent_limit(provider) -> int:
    body = provider.bodies[-1]
    return body["max_completion_tokens"] if provider.model.startswith("openai:") else body["max_tokens"]


def test_a_real_provider_sends_the_requests_output_limit(provider, settings):
    provider.push(provider.say("Short."), provider.say("Short."))

    provider_for(provider.model).complete(request_for(max_output_tokens=50), NoControl())
    assert _sent_limit(provider) == 50

    provider_for(provider.model).complete(request_for(), NoControl())
    assert _sent_limit(provider) == settings.STUDIO["MODEL_MAX_OUTPUT_TOKENS"]


def test_an_anthropic_answer_stopped_at_the_requests_limit_names_it(fake):
    fake.push(fake_anthropic.message(stop_reason="max_tokens"))

    with pytest.raises(ProviderError) as failed:
        AnthropicProvider("claude-test").complete(request_for(max_output_tokens=50), NoControl())

    assert "output limit (50 tokens)" in str(failed.value)


def test_the_scripted_model_cuts_its_reply_at_the_output_limit():
    script = json.dumps({"script": [{"say": SAY}]})
    pieces: list[str] = []

    reply = ScriptedProvider().complete(
        request_for(script, max_output_tokens=20, on_text=pieces.append), NoControl()
    )

    assert 0 < count_tokens(reply.text) <= 20
    assert SAY.startswith(reply.text) and reply.text != SAY
    assert "".join(pieces) == reply.text  # what streamed is what it said
    assert reply.usage.output_tokens == count_tokens(reply.text)


def test_the_scripted_model_says_all_of_a_reply_within_the_limit(studio_conf):
    script = json.dumps({"script": [{"say": SAY}]})
    assert ScriptedProvider().complete(request_for(script), NoControl()).text == SAY

    studio_conf(MODEL_MAX_OUTPUT_TOKENS=10)
    assert count_tokens(ScriptedProvider().complete(request_for(script), NoControl()).text) <= 10
