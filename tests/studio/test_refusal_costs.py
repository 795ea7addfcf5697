"""Refusing bad input costs little, whatever the input holds: the answer is
bounded (its message, its details, each problem's sentence), a "did you
mean" is looked for only for the first few unknown keys of a body, a list
stops checking its items after the first refused few, and a body too deep
or too wide is refused as it is parsed, before anything walks what it says.
What is bounded is counted (suggestions looked for, items checked, bytes
answered), not timed."""

import difflib
import gc
import io
import json
import sys

import pytest
from rest_framework.exceptions import ParseError

from agents.api.file_format import BlockFile
from studio.http.parsers import JSONBeyondBounds, StrictJSONParser, json_read

from ..conftest import error_of

# Each answer below would be megabytes unbounded; bounded, it is a few KB at most.
ANSWER_MAX_BYTES = 16_000
# The bounds docs/api.md states: problems listed in details, characters of a field or a problem.
DETAILS_MAX, PROBLEM_MAX_CHARS = 20, 200


@pytest.fixture
def suggestions(monkeypatch) -> list[str]:
    """The keys a "did you mean" was looked for, from here on."""
    looked_for = []
    search = difflib.get_close_matches

    def counting(word, possibilities, *args, **kwargs):
        looked_for.append(word)
        return search(word, possibilities, *args, **kwargs)

    monkeypatch.setattr(difflib, "get_close_matches", counting)
    return looked_for


@pytest.fixture
def blocks_checked(monkeypatch) -> list:
    """Each block of an agent file that validation looked at, from here on."""
    checked = []
    run_validation = BlockFile.run_validation

    def counting(self, data):
        checked.append(data)
        return run_validation(self, data)

    monkeypatch.setattr(BlockFile, "run_validation", counting)
    return checked


def function_calls(request) -> int:
    """The function calls, Python's and built-in, that `request()` makes in
    this thread, where the test client serves it."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        request()
    finally:
        sys.setprofile(None)
    return calls


def put(client, body: str):
    return client.generic("PUT", "/api/v1/agents/dm", body.encode(), content_type="application/json")


def import_(client, body: str):
    return client.generic("POST", "/api/v1/agents/import", body.encode(), content_type="application/json")


def agent_file(**parts) -> str:
    return json.dumps({"format": "studio.agent", "version": 1, "name": "copy", "config": {}, **parts})


def test_unknown_keys_are_named_five_at_most_and_the_rest_counted(admin_api, suggestions):
    body = json.dumps({"systemPrompt": "Hi", **{f"key{number:03}": 1 for number in range(900)}})

    response = put(admin_api, body)

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_definition"
    assert error["details"] == [
        *({"field": f"key{number:03}", "message": "is not a field here"} for number in range(5)),
        {"field": None, "message": "and 895 more keys that are not a field here"},
    ]
    assert error["message"].startswith("key000: is not a field here; key001: is not a field here;")
    assert len(suggestions) == 5


def test_a_did_you_mean_is_looked_for_only_for_the_first_five_unknown_keys_of_a_body(
    admin_api, agent, suggestions
):
    blocks = [{"entrie": []}] * 10

    response = import_(admin_api, agent_file(blocks=blocks))

    assert response.status_code == 400
    details = error_of(response)["details"]
    assert {"field": "blocks[0].entrie", "message": "is not a field here; did you mean 'entries'?"} in details
    assert {"field": "blocks[9].entrie", "message": "is not a field here"} in details
    assert suggestions == ["entrie"] * 5


def test_an_object_wider_than_any_the_studio_reads_is_refused_as_it_is_parsed(admin_api, suggestions):
    body = json.dumps({f"k{number}": 1 for number in range(120_000)})  # 1.6 MB, under the body limit

    response = put(admin_api, body)

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_json"
    assert "an object of more than 1,000 keys" in error["message"]
    assert suggestions == []
    assert len(response.content) < 500


def test_an_object_as_wide_as_the_studio_reads_is_parsed(admin_api):
    body = json.dumps({"systemPrompt": "Hi", **{f"k{number}": 1 for number in range(999)}})

    response = put(admin_api, body)

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_definition"  # read, then refused for what it says


NOT_A_BLOCK = "Invalid data. Expected a dictionary, but got str."


def test_a_list_stops_checking_its_items_after_the_first_ten_refused(admin_api, agent, blocks_checked):
    response = import_(admin_api, agent_file(blocks=["not a block"] * 5_000))

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_agent_file"
    assert len(blocks_checked) == 10
    assert error["details"] == [
        *({"field": f"blocks[{index}]", "message": NOT_A_BLOCK} for index in range(10)),
        {
            "field": "blocks",
            "message": "the items after [9] were not checked: this body has 10 refused already",
        },
    ]


def test_a_list_with_fewer_items_refused_is_checked_whole(admin_api, agent, blocks_checked):
    response = import_(admin_api, agent_file(blocks=["not a block"] * 9))

    assert len(blocks_checked) == 9
    assert [d["field"] for d in error_of(response)["details"]] == [f"blocks[{index}]" for index in range(9)]


def test_the_details_list_twenty_problems_and_count_the_rest(admin_api, agent):
    response = import_(admin_api, agent_file(blocks=[{}] * 5_000))

    error = error_of(response)
    assert len(error["details"]) == DETAILS_MAX + 1
    assert error["details"][-1]["field"] is None
    assert error["details"][-1]["message"].endswith("more problems, not listed")
    assert error["message"].count(": ") == 5 and error["message"].endswith("more problems")
    assert len(response.content) < ANSWER_MAX_BYTES


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"k" * 1_500_000: 1}),
        json.dumps({"compaction": {"type": "x" * 1_500_000, "maxTokens": 8000}}),
        json.dumps({"memory": {"maxOpenTokens": "9" * 1_500_000}}),
    ],
    ids=["a-long-unknown-key", "a-long-choice", "a-long-number"],
)
def test_an_answer_is_small_whatever_one_key_or_value_holds(admin_api, body):
    response = put(admin_api, body)

    assert response.status_code == 400
    error = error_of(response)
    for problem in error["details"]:
        assert len(problem["field"] or "") <= PROBLEM_MAX_CHARS
        assert len(problem["message"]) <= PROBLEM_MAX_CHARS
    assert len(response.content) < 2_000


def test_unknown_query_parameters_are_refused_within_the_same_bounds(api):
    names = "&".join(f"p{number}=1" for number in range(500))

    response = api.get(f"/api/v1/agents?{names}")

    assert response.status_code == 400
    error = error_of(response)
    assert error["details"][0] == {"field": "p0", "message": "is not a query parameter here"}
    assert error["details"][-1] == {"field": None, "message": "and 480 more problems, not listed"}
    assert error["message"].endswith("; and 495 more problems")
    assert len(response.content) < ANSWER_MAX_BYTES


def test_an_object_nested_past_the_recursion_limit_is_a_400_not_a_500(api, agent):
    body = '{"a": ' * 100_000 + "1" + "}" * 100_000

    response = api.generic(
        "POST", "/api/v1/agents/dm/messages", body.encode(), content_type="application/json"
    )

    assert response.status_code == 400
    assert "nested more than 100 levels deep" in error_of(response)["message"]


def test_a_send_refused_as_too_long_costs_no_more_calls_for_being_longer(api, agent):
    def send(characters: int):
        body = json.dumps({"content": "x" * characters})
        response = api.generic("POST", "/api/v1/agents/dm/messages", body, content_type="application/json")
        assert response.status_code == 413
        assert error_of(response)["code"] == "too_large"

    send(150_000)  # the first request's imports and caches, out of the count

    # Past the limit (100,000 characters) by half and by fifteen times:
    # nothing walks the text a character at a time to refuse it.
    assert function_calls(lambda: send(1_500_000)) <= function_calls(lambda: send(150_000)) + 50


def test_checking_a_body_against_the_bounds_makes_no_call_per_value_it_holds(api, agent):
    def send(lists: int):
        body = json.dumps({"content": "hi", "transient": [[], {}, 0] * lists})
        response = api.generic("POST", "/api/v1/agents/dm/messages", body, content_type="application/json")
        assert response.status_code == 400
        assert error_of(response)["message"] == "transient: must be true or false"

    send(10)  # the first request's imports and caches, out of the count

    assert function_calls(lambda: send(100_000)) <= function_calls(lambda: send(1_000)) + 50


def collector_passes(read) -> int:
    """The garbage collector's passes while `read()` runs."""
    passes = 0

    def count(phase, info):
        nonlocal passes
        passes += phase == "start"

    gc.callbacks.append(count)
    try:
        read()
    finally:
        gc.callbacks.remove(count)
    return passes


@pytest.mark.parametrize(
    "read",
    [lambda raw: StrictJSONParser().parse(io.BytesIO(raw)), json_read],
    ids=["an-api-body", "an-uploaded-file"],
)
def test_reading_a_body_of_many_lists_sets_off_no_pass_of_the_garbage_collector(read):
    lists = ("[" + "[0]," * 200_000 + "[0]]").encode()  # ~290 passes with the collector left on
    too_deep = ("[" * 101 + "]" * 101).encode()

    assert collector_passes(lambda: read(lists)) == 0
    assert gc.isenabled()
    with pytest.raises((ParseError, JSONBeyondBounds)):
        read(too_deep)
    assert gc.isenabled()
