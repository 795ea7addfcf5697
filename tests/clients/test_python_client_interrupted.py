"""The Python client follows a turn again when the studio ends its stream
with `stream_interrupted` (it could learn nothing more of the turn while
its Redis and its database were both away; #37): at the turn's events URL,
never sending the message twice, hearing no piece twice, and returning the
turn once `turn.finished` comes — a streamed send (sync and asyncio), a
turn followed after the studio's 202, and, when the studio never gets to
follow it, a `network_error` once the retries are spent. Against a real
studio (Daphne, PostgreSQL, Redis, the `scripted` model); the interruption
is the studio's own event, sent by a loopback HTTP proxy in between
(tests/support/interrupting_proxy.py)."""

import pytest
from django.conf import settings
from studio_client import StudioError, connect, connect_async, tool

from tests.support.interrupting_proxy import InterruptingProxy, streamed_send, turn_events

from ..conftest import call, script
from .test_python_client import web  # noqa: F401 (the studio these tests run against)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the servers it starts take this run's Redis"),
    pytest.mark.usefixtures("event_buffers_cleared", "stream_slots_cleared"),
]


@pytest.fixture
def proxy(web):  # noqa: F811
    with InterruptingProxy(web.url) as proxy:
        yield proxy


def asked(proxy: InterruptingProxy, since: int = 0) -> list[tuple[str, str, int]]:
    """(method, the path's last part, status) of the requests since `since`."""
    return [(method, path.rsplit("/", 1)[-1], status) for method, path, status in proxy.requests[since:]]


def turn_ids(dm) -> list[str]:
    return [block["turnId"] for page in dm.history() for block in page["blocks"]]


def test_a_streamed_send_interrupted_after_a_piece_follows_its_turn_at_the_events_url(proxy, designer_key):
    with connect(proxy.url, designer_key) as io:
        dm = io.Agent("dm", {})
        assert dm.ready
        proxy.interrupt(which=streamed_send, after="reply.delta")
        before, pieces = len(proxy.requests), []

        turn = dm.send(script({"say": "The bells ring twice.", "sleep": 0.2}), on_text=pieces.append)

        assert proxy.interrupted == 1
        assert (turn["status"], turn["reply"]) == ("completed", "The bells ring twice.")
        assert "".join(pieces) == turn["reply"]
        # Sent once; then the turn's events, by its id.
        assert asked(proxy, before) == [("POST", "messages", 200), ("GET", "events", 200)]
        assert proxy.requests[before + 1][1] == f"/api/v1/agents/dm/turns/{turn['id']}/events"
        assert turn_ids(dm) == [turn["id"]]


async def test_the_async_client_interrupted_before_any_event_finds_its_turn_in_the_message(
    proxy, designer_key
):
    async with connect_async(proxy.url, designer_key) as io:
        dm = io.Agent("dm", {})
        await dm.ready
        proxy.interrupt(which=streamed_send, after=None)
        before, pieces = len(proxy.requests), []

        async def heard(text):
            pieces.append(text)

        turn = await dm.send(script({"sleep": 0.2}, {"say": "Late, but whole."}), on_text=heard)

        assert proxy.interrupted == 1
        assert turn["reply"] == "Late, but whole."
        assert "".join(pieces) == turn["reply"]
        assert asked(proxy, before) == [("POST", "messages", 200), ("GET", "events", 200)]
        history = [block["turnId"] async for page in dm.history() for block in page["blocks"]]
        assert history == [turn["id"]]


def test_a_turn_followed_after_a_202_and_interrupted_is_followed_again_its_tool_run_once(proxy, designer_key):
    runs = []

    @tool(description="Hand the player an item.", parameters={"type": "object"})
    def give_item(args, ctx):
        runs.append(args["item"])
        return "Given."

    with connect(proxy.url, designer_key) as io:
        inn = io.Agent("inn", {"tools": [give_item]})
        assert inn.ready
        proxy.interrupt(which=turn_events, after="tool.requested")
        before = len(proxy.requests)

        turn = inn.send(script(call("give_item", item="key"), {"say": "Here."}))

        assert proxy.interrupted == 1
        assert (turn["status"], turn["reply"]) == ("completed", "Here.")
        assert runs == ["key"]
        sent = [entry for entry in asked(proxy, before) if entry[1] != "tool-results"]
        assert sent == [("POST", "messages", 202), ("GET", "events", 200), ("GET", "events", 200)]
        assert turn_ids(inn) == [turn["id"]]


def test_a_turn_never_followed_again_is_a_network_error_once_the_retries_are_spent_and_ran_once(
    proxy, designer_key
):
    with connect(proxy.url, designer_key, retries=2) as io:
        dm = io.Agent("dm", {})
        assert dm.ready
        either = lambda method, path: streamed_send(method, path) or turn_events(method, path)  # noqa: E731
        proxy.interrupt(which=either, after="turn.started", times=99)
        before = len(proxy.requests)

        with pytest.raises(StudioError) as failed:
            dm.send(script({"sleep": 0.3}, {"say": "Unheard."}), on_text=lambda text: None)

        assert failed.value.code == "network_error"
        assert "can no longer follow this turn" in failed.value.message  # the studio's words
        assert asked(proxy, before) == [
            ("POST", "messages", 200),
            ("GET", "events", 200),
            ("GET", "events", 200),
        ]
        ran = dm.turn_by_idempotency_key(failed.value.idempotency_key)
        assert turn_ids(dm) == [ran["id"]]
