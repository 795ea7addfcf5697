"""An answer the studio cannot read is one the provider took, and bills:
whatever goes wrong reading it — no choices, a body that is not JSON, JSON
nested past what a decoder recurses, a failure of the studio's own — ends
the call as a `ProviderError` that is `reached` (and carries the usage,
when the provider reported one), never as a bare exception; the turn
that made it is charged."""

import json

import pytest

from agents.models import TurnStatus
from agents.providers import anthropic_messages
from agents.providers.anthropic_messages import AnthropicProvider
from agents.providers.base import UNREADABLE, CompactionRequest, ModelRequest, ProviderError, Usage
from agents.providers.openai_chat import OpenAIProvider
from agents.providers.prompts import COMPACTOR_INSTRUCTIONS, compaction_prompt
from agents.sending.context import context_assemble
from billing.models import CostLine
from studio.tokens import count_tokens
from tests.support import fake_anthropic
from tests.support.fake_openai import completion, raw
from tests.support.providers import NoControl
from tests.support.sending import turn_send

DEEP = 2_000
# A whole completion (a server that does not stream) with no choice in it.
NO_CHOICES = raw(
    200, json.dumps({"id": "x", "object": "chat.completion", "choices": []}), content_type="application/json"
)


def deep_json(levels: int = DEEP) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def step_request() -> ModelRequest:
    messages = [{"role": "user", "content": "Who is there?"}]
    return ModelRequest(system="", context_block=None, messages=messages, tools=[], input_tokens=42)


def model_line(turn) -> CostLine | None:
    return CostLine.objects.filter(turn_id=turn.uuid, kind="model").first()


@pytest.mark.parametrize(
    "answer",
    [NO_CHOICES, raw(200, "this is not JSON"), raw(200, deep_json(), content_type="application/json")],
    ids=["no-choices", "not-json", "nested-2000-deep"],
)
def test_an_openai_answer_that_cannot_be_read_is_charged_what_was_sent(
    define, fake_openai, studio_conf, answer
):
    studio_conf(MODEL_MAX_RETRIES=0)
    agent = define("dm", model="openai:gpt-test")
    sent = context_assemble(agent).total_tokens + count_tokens("Hello")
    fake_openai.push(answer)

    turn = turn_send(agent=agent, content="Hello")

    assert turn.status == TurnStatus.FAILED
    assert "could not be read" in turn.error
    line = model_line(turn)
    assert line is not None, "the provider billed the call: it is charged"
    assert (line.detail["inputTokens"], line.detail["outputTokens"]) == (sent, 0)


def test_an_openai_answer_nested_past_the_decoder_is_a_provider_error_not_a_recursion_error(fake_openai):
    fake_openai.push(raw(200, deep_json(), content_type="application/json"))

    with pytest.raises(ProviderError) as failed:
        OpenAIProvider("gpt-test").complete(step_request(), NoControl())

    assert (failed.value.reached, failed.value.public) == (True, UNREADABLE)


def stream_then(*tail: str, usage: dict | None = None) -> dict:
    """A streamed answer (a few words, then its usage as its own chunk, as
    OpenAI sends it) with `tail`'s events after it."""
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test"}
    events = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "The ferry"}}]},
        {**head, "choices": [], "usage": usage or {"prompt_tokens": 77, "completion_tokens": 3}},
    ]
    body = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
    body += "".join(f"data: {event}\n\n" for event in tail)
    return raw(200, body, content_type="text/event-stream")


@pytest.mark.parametrize(
    "tail",
    [
        ['{"choices": [{"delta": {"content": "and then'],
        ['{"error": {"message": "The model overloaded."}}'],
        ["[DONE]"],  # no choice ever finished
    ],
    ids=["not-json", "error-mid-stream", "no-finish"],
)
def test_an_openai_stream_that_breaks_after_its_usage_is_charged_that_usage(
    define, fake_openai, studio_conf, tail
):
    studio_conf(MODEL_MAX_RETRIES=0)
    agent = define("dm", model="openai:gpt-test")
    fake_openai.push(stream_then(*tail))

    turn = turn_send(agent=agent, content="Hello")

    assert turn.status == TurnStatus.FAILED
    line = model_line(turn)
    assert (line.detail["inputTokens"], line.detail["outputTokens"]) == (77, 3), "what the server reported"


def _with_an_unreadable_event() -> fake_anthropic.Reply:
    """A streamed message with an event in it nested 2,000 deep (after
    message_start, which reported the input)."""
    reply = fake_anthropic.message(fake_anthropic.text("Hello there."), usage={"input_tokens": 700})
    events = fake_anthropic.stream_events(reply.body)
    deep = '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x", "more": '
    events.insert(3, ("content_block_delta", deep + deep_json() + "}}"))
    reply.events = events
    return reply


def test_an_anthropic_event_nested_past_the_decoder_is_charged_what_message_start_reported(fake):
    fake.push(_with_an_unreadable_event())

    with pytest.raises(ProviderError) as failed:
        AnthropicProvider("claude-test").complete(step_request(), NoControl())

    assert failed.value.public == UNREADABLE
    # The input message_start reported, and the output that streamed before the break.
    assert failed.value.usage == Usage(input_tokens=700, output_tokens=count_tokens("Hello "))


def test_a_turn_whose_anthropic_answer_cannot_be_read_fails_and_is_charged(define, fake):
    agent = define("dm", model="anthropic:claude-test")
    fake.push(_with_an_unreadable_event())

    turn = turn_send(agent=agent, content="Hello")

    assert turn.status == TurnStatus.FAILED
    assert "could not be read" in turn.error
    assert model_line(turn).detail["inputTokens"] == 700


def test_anything_that_fails_reading_a_whole_anthropic_message_is_charged_its_usage(fake, monkeypatch):
    fake.push(fake_anthropic.message(fake_anthropic.text("Hello there.")))

    def broken(content):
        raise KeyError("something the studio did not expect")

    monkeypatch.setattr(anthropic_messages, "_text_of", broken)

    with pytest.raises(ProviderError) as failed:
        AnthropicProvider("claude-test").complete(step_request(), NoControl())

    assert (failed.value.public, failed.value.usage) == (
        UNREADABLE,
        Usage(input_tokens=100, output_tokens=20),
    )


def test_an_openai_compactor_that_reports_no_usage_is_charged_the_input_counted_here(fake_openai):
    request = CompactionRequest(
        system="", previous_summary=None, messages=[{"role": "user", "content": "I pay."}], open_memories=[]
    )
    answer = json.dumps({"summary": "Paid.", "memories": []})
    fake_openai.push(completion(answer, usage=None))

    reply = OpenAIProvider("gpt-test").summarize(request)

    counted = count_tokens(COMPACTOR_INSTRUCTIONS) + count_tokens(compaction_prompt(request))
    assert reply.usage == Usage(input_tokens=counted, output_tokens=count_tokens(answer))
