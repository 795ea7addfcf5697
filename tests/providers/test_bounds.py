"""A model's output is untrusted input: what it sends as a tool call's
arguments, or as the compactor's answer, is read with bounds — size and
nesting depth (STUDIO_MAX_TOOL_ARGUMENTS_BYTES, STUDIO_MAX_OUTPUT_DEPTH) —
and nothing it sends, however deep, raises RecursionError."""

import json

import pytest

from agents.providers.anthropic_messages import AnthropicProvider
from agents.providers.base import (
    CompactionRequest,
    ModelRequest,
    ProviderError,
    UnparsedArguments,
    Usage,
    arguments_read,
)
from agents.providers.openai_chat import OpenAIProvider
from agents.providers.prompts import compaction_parse
from agents.providers.scripted import ScriptedProvider, parse_script
from tests.support import fake_anthropic
from tests.support.fake_openai import completion, tool_call
from tests.support.providers import NoControl

DEEP = 2_000
TOO_DEEP = "are nested deeper than 32 levels"


def nested_text(levels: int, *, inner: str = "1") -> str:
    """A JSON object `levels` deep, as text: {"a": {"a": … 1 …}}."""
    return '{"a": ' * levels + inner + "}" * levels


def nested_value(levels: int):
    """The same, decoded — built without recursion."""
    value = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def step_request(**fields) -> ModelRequest:
    return ModelRequest(
        system="You are the ferryman.",
        context_block=None,
        messages=[{"role": "user", "content": "Open the quest."}],
        tools=["open_memory"],
        input_tokens=42,
        **fields,
    )


def compaction_request() -> CompactionRequest:
    return CompactionRequest(
        system="You are the ferryman.",
        previous_summary=None,
        messages=[{"role": "user", "content": "I pay the ferryman."}],
        open_memories=[],
    )


# --- arguments_read ----------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [None, "", "  \n"])
def test_no_arguments_at_all_are_an_empty_object(raw):
    assert arguments_read(raw) == {}


def test_a_json_object_is_its_dict_whether_text_or_decoded():
    assert arguments_read('{"name": "quest"}') == {"name": "quest"}
    assert arguments_read({"name": "quest"}) == {"name": "quest"}


def test_text_that_is_not_json_is_kept_with_a_reason_the_model_can_act_on():
    read = arguments_read('{"name": "quest"')

    assert isinstance(read, UnparsedArguments)
    assert read == '{"name": "quest"'
    assert read.reason.startswith("were not valid JSON (Expecting ")


def test_a_valid_value_that_is_not_an_object_is_handed_on_as_it_came():
    assert type(arguments_read('["quest"]')) is str
    assert arguments_read('["quest"]') == '["quest"]'
    assert arguments_read(["quest"]) == ["quest"]


@pytest.mark.parametrize("raw", [nested_text(DEEP), "[" * DEEP + "]" * DEEP, nested_value(DEEP)])
def test_arguments_nested_2000_deep_are_not_read_and_nothing_recurses(raw):
    read = arguments_read(raw)

    assert isinstance(read, UnparsedArguments)
    assert read.reason == TOO_DEEP
    assert len(read) == 2_000  # what is kept of it is a preview
    assert read.startswith('{"a": {"a": ' if not isinstance(raw, str) or raw[0] == "{" else "[[[[")


def test_the_depth_bound_is_the_setting(studio_conf):
    assert arguments_read(nested_text(32)) == json.loads(nested_text(32))
    assert arguments_read(nested_text(33)).reason == TOO_DEEP

    studio_conf(MAX_OUTPUT_DEPTH=3)
    assert arguments_read(nested_text(3)) == {"a": {"a": {"a": 1}}}
    assert arguments_read(nested_text(4)).reason == "are nested deeper than 3 levels"
    assert arguments_read(nested_value(4)).reason == "are nested deeper than 3 levels"


def test_arguments_over_the_byte_bound_are_not_read(studio_conf, settings):
    assert settings.STUDIO["MAX_TOOL_ARGUMENTS_BYTES"] == 1_048_576  # the store cap
    big = json.dumps({"name": "notes", "content": "x" * 2_000_000})

    read = arguments_read(big)

    assert read.reason == f"are {len(big):,} bytes, over the 1,048,576 bytes the studio reads"
    assert read == big[:2_000]

    studio_conf(MAX_TOOL_ARGUMENTS_BYTES=1_000)
    text = json.dumps({"content": "é" * 600}, ensure_ascii=False)  # 600 characters, 1,200 bytes of them
    assert arguments_read(text).reason == "are 1,215 bytes, over the 1,000 bytes the studio reads"
    assert arguments_read(json.loads(text)).reason == "are 1,215 bytes, over the 1,000 bytes the studio reads"
    assert arguments_read(json.dumps({"content": "é" * 400}, ensure_ascii=False)) == {"content": "é" * 400}


def test_unparsed_arguments_made_from_text_alone_read_their_reason():
    assert UnparsedArguments('{"name": "quest"').reason.startswith("were not valid JSON (")
    assert UnparsedArguments(nested_text(DEEP)).reason == TOO_DEEP


# --- through the SDKs ---------------------------------------------------------------------------


def test_openai_arguments_nested_2000_deep_are_a_tool_call_the_engine_refuses(fake_openai):
    deep = nested_text(DEEP)
    fake_openai.push(completion(tool_calls=[tool_call("open_memory", deep)]))

    reply = OpenAIProvider("gpt-test").complete(step_request(), NoControl())

    (call,) = reply.tool_calls
    assert call.name == "open_memory"
    assert (type(call.arguments), call.arguments.reason) == (UnparsedArguments, TOO_DEEP)
    assert call.arguments == deep[:2_000]
    assert reply.usage == Usage(input_tokens=100, output_tokens=20)  # the answer is charged


def test_anthropic_tool_input_nested_2000_deep_is_read_once_without_the_sdk_giving_up(fake):
    # The SDK's own message stream decodes the input at every piece, and
    # raises past a few hundred levels: the studio reads it once, bounded.
    fake.push(fake_anthropic.message(fake_anthropic.tool_use("open_memory", json_text=nested_text(DEEP))))

    reply = AnthropicProvider("claude-test").complete(step_request(), NoControl())

    (call,) = reply.tool_calls
    assert (type(call.arguments), call.arguments.reason) == (UnparsedArguments, TOO_DEEP)
    assert reply.usage == Usage(input_tokens=100, output_tokens=20)


def test_anthropic_tool_input_over_the_bounds_is_not_read(fake, studio_conf):
    studio_conf(MAX_TOOL_ARGUMENTS_BYTES=1_000)
    fake.push(
        fake_anthropic.message(
            fake_anthropic.tool_use("open_memory", nested_value(40)),
            fake_anthropic.tool_use("close_memory", {"name": "notes", "content": "x" * 2_000}),
            fake_anthropic.tool_use("open_memory", {"name": "quest"}),
        )
    )

    reply = AnthropicProvider("claude-test").complete(step_request(), NoControl())

    deep, big, fine = (call.arguments for call in reply.tool_calls)
    assert deep.reason == TOO_DEEP
    assert big.reason.endswith("bytes, over the 1,000 bytes the studio reads")
    assert fine == {"name": "quest"}


# --- the compactor ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw", [nested_text(DEEP), nested_value(DEEP), "```json\n" + nested_text(40) + "\n```"]
)
def test_a_compactor_answer_nested_too_deep_is_a_failed_call_that_keeps_its_usage(raw):
    usage = Usage(input_tokens=900, output_tokens=300)

    with pytest.raises(ProviderError) as failed:
        compaction_parse(raw, compaction_request(), usage)

    assert failed.value.usage == usage
    assert failed.value.public == "the compactor's answer is nested deeper than 32 levels"


def test_a_compactor_answer_within_the_bounds_is_read():
    raw = json.dumps({"summary": "Paid.", "memories": [{"name": "quest", "content": nested_text(40)}]})

    reply = compaction_parse(raw, compaction_request(), Usage())

    assert reply.summary == "Paid."  # a deep text inside a string is only text


def test_a_compactor_rewrite_names_its_memory_as_the_store_keeps_names():
    request = compaction_request()
    request.open_memories = [{"name": "caf\u00e9", "description": "d", "content": "The inn.", "version": 1}]
    raw = json.dumps({"summary": "Paid.", "memories": [{"name": "cafe\u0301", "content": "The inn, paid."}]})

    reply = compaction_parse(raw, request, Usage())

    assert reply.rewrites == {"caf\u00e9": "The inn, paid."}  # decomposed in the answer, NFC here


def test_openai_compactor_answer_nested_2000_deep_is_charged(fake_openai):
    fake_openai.push(completion(nested_text(DEEP), usage=(900, 300)))

    with pytest.raises(ProviderError) as failed:
        OpenAIProvider("gpt-test").summarize(compaction_request())

    assert failed.value.usage == Usage(input_tokens=900, output_tokens=300)
    assert "nested deeper than 32 levels" in failed.value.public


def test_anthropic_compactor_answer_nested_2000_deep_is_charged(fake):
    answer = fake_anthropic.tool_use("write_checkpoint", json_text=nested_text(DEEP))
    fake.push(fake_anthropic.message(answer, usage={"input_tokens": 900, "output_tokens": 300}))

    with pytest.raises(ProviderError) as failed:
        AnthropicProvider("claude-test").summarize(compaction_request())

    assert failed.value.usage == Usage(input_tokens=900, output_tokens=300)
    assert failed.value.public == "the compactor's answer is nested deeper than 32 levels"


def _broken(*args, **kwargs):
    raise KeyError("something the studio did not expect")


def test_anything_that_fails_reading_the_openai_compactors_answer_is_a_charged_provider_error(
    fake_openai, monkeypatch
):
    fake_openai.push(completion(json.dumps({"summary": "Paid.", "memories": []}), usage=(900, 300)))
    monkeypatch.setattr("agents.providers.openai_chat.compaction_parse", _broken)

    with pytest.raises(ProviderError) as failed:
        OpenAIProvider("gpt-test").summarize(compaction_request())

    assert (failed.value.reached, failed.value.usage) == (True, Usage(input_tokens=900, output_tokens=300))
    assert failed.value.public == "the model's answer could not be read"


def test_anything_that_fails_reading_the_anthropic_compactors_answer_is_a_charged_provider_error(
    fake, monkeypatch
):
    answer = fake_anthropic.tool_use("write_checkpoint", {"summary": "Paid.", "memories": []})
    fake.push(fake_anthropic.message(answer, usage={"input_tokens": 900, "output_tokens": 300}))
    monkeypatch.setattr("agents.providers.anthropic_messages.compaction_parse", _broken)

    with pytest.raises(ProviderError) as failed:
        AnthropicProvider("claude-test").summarize(compaction_request())

    assert (failed.value.reached, failed.value.usage) == (True, Usage(input_tokens=900, output_tokens=300))
    assert failed.value.public == "the model's answer could not be read"


# --- the scripted model -------------------------------------------------------------------------


def test_a_message_nested_2000_deep_is_no_script_and_gets_a_reply():
    deep = '{"script": ' + "[" * DEEP + "]" * DEEP + "}"
    assert parse_script(deep) is None

    request = ModelRequest(
        system="", context_block=None, messages=[{"role": "user", "content": deep}], tools=[]
    )
    assert ScriptedProvider().complete(request, NoControl()).text.startswith('You said: "{"script": [[[')


def test_a_scripts_arguments_are_read_with_the_bounds_of_a_real_models(studio_conf):
    script = {"script": [{"call": "open_memory", "args": nested_value(40)}, {"say": "Done."}]}
    request = ModelRequest(
        system="",
        context_block=None,
        messages=[{"role": "user", "content": json.dumps(script)}],
        tools=["open_memory"],
    )

    (call,) = ScriptedProvider().complete(request, NoControl()).tool_calls

    assert call.arguments.reason == TOO_DEEP
    assert call.arguments.startswith('{"a": {"a": ')
