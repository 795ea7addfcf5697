"""The offline `scripted` model (docs/models.md, "The scripted model"),
as a chat model and as a compactor."""

import math

import pytest

from agents.providers import scripted as scripted_module
from agents.providers.base import CompactionRequest, ModelRequest, ProviderError
from agents.providers.scripted import ScriptedProvider
from studio.tokens import count_tokens
from tests.support.providers import NoControl

from ..conftest import call, script

TOOLS = ["open_memory", "close_memory", "delete_memory"]


@pytest.fixture(autouse=True)
def default_sleep_cap(studio_conf):
    """The cap as the studio sets it when STUDIO_SCRIPTED_SLEEP_MAX_SECONDS
    is not (the tests' environment raises it for turns held until cancelled)."""
    studio_conf(SCRIPTED_SLEEP_MAX_SECONDS=10.0)


def step(messages, tools=TOOLS, input_tokens=100, control=None, on_text=None):
    request = ModelRequest(
        system="S",
        context_block=None,
        messages=messages,
        tools=tools,
        input_tokens=input_tokens,
        on_text=on_text,
    )
    return ScriptedProvider().complete(request, control or NoControl())


class SleepRecorder(NoControl):
    """A control that notes how long it was asked to sleep, and does not."""

    def __init__(self):
        self.slept = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def tool_result(call_id="call_1"):
    return [
        {"role": "assistant", "content": None, "toolCalls": [{"id": call_id, "name": "x", "arguments": {}}]},
        {"role": "tool", "toolCallId": call_id, "name": "x", "content": "r", "isError": False},
    ]


def test_it_plays_a_script_one_call_per_step_then_says_the_last_say():
    content = script(
        call("open_memory", name="a"), {"say": "first"}, call("close_memory", name="a"), {"say": "last"}
    )
    user = [{"role": "user", "content": content}]

    one = step(user)
    two = step(user + tool_result("call_1"))
    three = step(user + tool_result("call_1") + tool_result("call_2"))

    assert [(c.name, c.arguments) for c in one.tool_calls] == [("open_memory", {"name": "a"})]
    assert [(c.name, c.arguments) for c in two.tool_calls] == [("close_memory", {"name": "a"})]
    assert (three.text, three.tool_calls) == ("last", [])


def test_a_script_without_a_say_ends_with_ok():
    assert step([{"role": "user", "content": script()}]).text == "ok"


def test_calls_to_tools_not_offered_are_skipped():
    reply = step(
        [{"role": "user", "content": script(call("open_memory", name="a"), {"say": "hi"})}], tools=[]
    )

    assert (reply.text, reply.tool_calls) == ("hi", [])


def test_only_the_newest_user_message_is_played():
    old = {"role": "user", "content": script(call("open_memory", name="old"))}
    reply = step([old, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "plain words"}])

    assert reply.text == 'You said: "plain words"'


def test_other_messages_get_a_deterministic_reply_quoting_them():
    first = step([{"role": "user", "content": "I open the chapel door."}])
    again = step([{"role": "user", "content": "I open the chapel door."}])

    assert first.text == again.text == 'You said: "I open the chapel door."'


def test_a_fail_step_makes_the_model_call_fail():
    with pytest.raises(ProviderError, match="rate limited"):
        step([{"role": "user", "content": script({"fail": "rate limited"})}])


def test_a_sleep_step_waits_as_long_as_it_says_up_to_ten_seconds():
    control = SleepRecorder()

    step(
        [{"role": "user", "content": script({"sleep": 0.5}, {"sleep": 60}, {"say": "awake"})}],
        control=control,
    )

    assert control.slept == [0.5, 10]


def test_the_reply_is_written_a_word_at_a_time():
    pieces = []

    reply = step(
        [{"role": "user", "content": script({"say": "  The bells ring at dusk. "})}], on_text=pieces.append
    )

    assert pieces == ["  The ", "bells ", "ring ", "at ", "dusk. "]
    assert "".join(pieces) == reply.text == "  The bells ring at dusk. "


def test_a_say_with_a_sleep_pauses_before_each_word_up_to_ten_seconds_in_all():
    control, pieces = SleepRecorder(), []

    step([{"role": "user", "content": script({"say": "One two three", "sleep": 0.2})}], control=control)
    step([{"role": "user", "content": script({"say": "One two three four", "sleep": 60})}], control=control)
    step([{"role": "user", "content": "Hello there"}], control=control, on_text=pieces.append)

    assert control.slept == [0.2] * 3 + [2.5] * 4
    assert pieces == ["You ", "said: ", '"Hello ', 'there"']


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("abc", '"abc"'),
        (-1, "-1"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (10**400, "1" + "0" * 36 + "..."),
        ([1], "[1]"),
        (True, "true"),
    ],
)
def test_a_sleep_step_that_is_not_a_number_of_seconds_fails_the_call_saying_so(value, shown):
    control = SleepRecorder()

    with pytest.raises(ProviderError) as failed:
        step([{"role": "user", "content": script({"sleep": value}, {"say": "never"})}], control=control)

    assert str(failed.value) == (
        f"the script's sleep step needs a number of seconds from 0 up (it waits 10 s at most), not {shown}"
    )
    assert control.slept == []


def test_usage_is_counted_with_tiktoken():
    reply = step([{"role": "user", "content": "hello"}], input_tokens=42)

    assert reply.usage.input_tokens == 42
    assert reply.usage.output_tokens == count_tokens('You said: "hello"')


def compact(messages, open_memories, previous=None):
    return ScriptedProvider().summarize(
        CompactionRequest(
            system="S", previous_summary=previous, messages=messages, open_memories=open_memories
        )
    )


def test_the_compactor_summarizes_the_folded_messages_after_the_previous_summary():
    reply = compact(
        [{"role": "user", "content": "I take the key."}, {"role": "assistant", "content": "It is cold."}],
        [],
        previous="- user: earlier",
    )

    assert reply.summary == "- user: earlier\n- user: I take the key.\n- assistant: It is cold."
    assert reply.rewrites == {}
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0


def test_memory_lines_rewrite_open_memories_only_and_the_last_line_wins():
    reply = compact(
        [
            {"role": "user", "content": "@memory quest: find the key"},
            {"role": "assistant", "content": "Noted.\n@memory quest: open the house\n@memory npcs: nobody"},
        ],
        [{"name": "quest", "description": "d", "content": "old", "version": 3}],
    )

    assert reply.rewrites == {"quest": "open the house"}


def test_the_compactors_summary_keeps_within_its_token_budget():
    messages = [{"role": "user", "content": f"line {n} " + "word " * 20} for n in range(40)]

    reply = ScriptedProvider().summarize(
        CompactionRequest(
            system="S", previous_summary=None, messages=messages, open_memories=[], summary_max_tokens=200
        )
    )

    assert count_tokens(reply.summary) <= 200
    assert reply.summary.endswith("line 39 " + "word " * 19 + "word")


def test_a_compactor_sleep_line_waits_up_to_ten_seconds(monkeypatch):
    slept = []
    monkeypatch.setattr(scripted_module.time, "sleep", slept.append)

    compact([{"role": "user", "content": "@compactor-sleep 0.25\n@compactor-sleep 3600"}], [])

    assert slept == [0.25, 10]


@pytest.mark.parametrize(("value", "shown"), [("abc", '"abc"'), ("-2", '"-2"'), ("nan", '"nan"')])
def test_a_compactor_sleep_line_that_is_not_a_number_fails_the_compaction_saying_so(
    monkeypatch, value, shown
):
    monkeypatch.setattr(scripted_module.time, "sleep", lambda seconds: None)

    with pytest.raises(ProviderError) as failed:
        compact([{"role": "user", "content": f"@compactor-sleep {value}"}], [])

    assert str(failed.value) == (
        f"@compactor-sleep needs a number of seconds from 0 up (it waits 10 s at most), not {shown}"
    )
