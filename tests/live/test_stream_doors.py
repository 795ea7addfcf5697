"""Server-sent event answers (a turn's events, a streamed send) through the
real ASGI application: they look at their key again while they stream, and
they count, with the game's WebSockets, against STUDIO_MAX_STREAMS_PER_GAME."""

import json

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.db import database_sync_to_async
from django.utils import timezone

from agents.models import Turn, TurnStatus
from agents.sending.turn_slot import turn_cancel
from agents.services import AgentDefinition, agent_define
from agents.wire import turn_wire
from studio.asgi import application
from studio.models import ApiKey
from tests.support.live import connect, in_background, refused_as_too_many
from tests.support.sending import turn_send

from ..conftest import UNTIL_CANCELLED, script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("event_buffers_cleared", "stream_slots_cleared"),
]

SLOW = script(UNTIL_CANCELLED, {"say": "too late"})


class Answer:
    """An HTTP answer read from the ASGI application as it streams."""

    def __init__(self, communicator, start):
        self.communicator, self.status = communicator, start["status"]
        self.headers = {name.decode().lower(): value.decode() for name, value in start["headers"]}
        self.buffer, self.ended = b"", False

    async def events(self, until=None) -> list[tuple[str, dict]]:
        """Its server-sent events as (type, data), up to the one `until`
        accepts, or to the end of the answer."""
        found = []
        while True:
            while b"\n\n" in self.buffer:
                block, self.buffer = self.buffer.split(b"\n\n", 1)
                fields = dict(line.split(": ", 1) for line in block.decode().splitlines() if ": " in line)
                if "event" in fields:
                    found.append((fields["event"], json.loads(fields["data"])))
                    if until and until(found[-1]):
                        return found
            if self.ended:
                return found
            message = await self.communicator.receive_output(timeout=60)
            self.buffer += message.get("body", b"")
            self.ended = not message.get("more_body", False)

    async def body(self) -> dict:
        message = await self.communicator.receive_output(timeout=60)
        return json.loads(message["body"])

    async def close(self):
        """The client goes away."""
        await self.communicator.send_input({"type": "http.disconnect"})
        await self.communicator.wait(timeout=60)


async def http(method: str, path: str, key: str, body: dict | None = None) -> Answer:
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"localhost"),
            (b"authorization", f"Bearer {key}".encode()),
            (b"content-type", b"application/json"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("localhost", 80),
    }
    payload = json.dumps(body).encode() if body else b""
    scope["headers"].append((b"content-length", str(len(payload)).encode()))
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": payload, "more_body": False})
    return Answer(communicator, await communicator.receive_output(timeout=60))


def _running_turn(agent) -> Turn:
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())
    return Turn.objects.get(agent=agent, status=TurnStatus.RUNNING)


async def follow_slow_turn(agent, key) -> tuple[Answer, Turn, object]:
    """A turn that sleeps, and its events' answer, read up to turn.started."""
    running = in_background(turn_send, agent=agent, content=SLOW)
    turn = await database_sync_to_async(_running_turn)(agent)
    answer = await http("GET", f"/api/v1/agents/{agent.name}/turns/{turn.uuid}/events", key)
    assert answer.status == 200
    await answer.events(until=lambda event: event[0] == "turn.started")
    return answer, turn, running


def _ended_turn_of(game) -> Turn:
    agent, _ = agent_define(game=game, name="dm", definition=AgentDefinition(), by=None, via="command")
    return turn_send(agent=agent, content="hello")


def _revoke(key_text):
    ApiKey.objects.filter(prefix=key_text.split("_")[1]).update(revoked_at=timezone.now())


def _delete(key_text):
    ApiKey.objects.filter(prefix=key_text.split("_")[1]).delete()


def _status(turn) -> str:
    return Turn.objects.get(pk=turn.pk).status


@pytest.mark.parametrize("take_away", [_revoke, _delete])
async def test_a_turns_event_stream_ends_with_an_error_once_its_key_is_gone(
    define, designer_key, studio_conf, take_away
):
    studio_conf(WS_REJOIN_SECONDS=0.1)
    agent = await database_sync_to_async(define)("dm")
    answer, turn, running = await follow_slow_turn(agent, designer_key)

    await database_sync_to_async(take_away)(designer_key)
    rest = await answer.events()

    assert [name for name, _ in rest] == ["error"]
    assert rest[0][1]["code"] == "unauthenticated" and "revoked" in rest[0][1]["message"]
    assert answer.ended
    assert await database_sync_to_async(_status)(turn) == TurnStatus.RUNNING  # only the listening stopped
    await database_sync_to_async(turn_cancel)(turn)
    await running


async def test_a_streamed_send_stops_being_heard_once_its_key_is_revoked_and_its_turn_goes_on(
    define, designer_key, studio_conf
):
    studio_conf(WS_REJOIN_SECONDS=0.1)
    await database_sync_to_async(define)("dm")
    words = " ".join(f"word{n}" for n in range(12))
    answer = await http(
        "POST",
        "/api/v1/agents/dm/messages",
        designer_key,
        {"content": script({"say": words, "sleep": 0.1}), "stream": True},
    )
    assert answer.status == 200
    first = await answer.events(until=lambda event: event[0] == "reply.delta")

    await database_sync_to_async(_revoke)(designer_key)
    rest = await answer.events()

    assert rest[-1][0] == "error" and rest[-1][1]["code"] == "unauthenticated"
    assert "turn.finished" not in [name for name, _ in rest]
    turn_id = first[-1][1]["turnId"]
    await database_sync_to_async(wait_for)(lambda: Turn.objects.get(uuid=turn_id).has_ended)
    turn = await database_sync_to_async(lambda: turn_wire(Turn.objects.get(uuid=turn_id)))()
    assert (turn["status"], turn["reply"]) == (TurnStatus.COMPLETED, words)


async def test_event_streams_and_websockets_share_the_games_limit(
    define, game, other_game, designer_key, outsider_key, studio_conf
):
    studio_conf(MAX_STREAMS_PER_GAME=2)
    agent = await database_sync_to_async(define)("dm")
    await database_sync_to_async(define)("bard")
    theirs = await database_sync_to_async(_ended_turn_of)(other_game)
    listener = await connect("/ws/v1/agents/dm/events", key=designer_key)
    assert (await listener.receive_json_from())["type"] == "hello"
    answer, turn, running = await follow_slow_turn(agent, designer_key)

    refused = await http(
        "POST", "/api/v1/agents/bard/messages", designer_key, {"content": "hello", "stream": True}
    )
    followed = await http("GET", f"/api/v1/agents/dm/turns/{turn.uuid}/events", designer_key)
    await refused_as_too_many(await connect("/ws/v1/agents/bard/events", key=designer_key))
    other_games = await http("GET", f"/api/v1/agents/dm/turns/{theirs.uuid}/events", outsider_key)

    for too_many in (refused, followed):
        assert too_many.status == 429, too_many.status
        assert int(too_many.headers["retry-after"]) >= 1, too_many.headers
        assert (await too_many.body())["error"]["code"] == "too_many_streams"
    assert other_games.status == 200
    assert (await other_games.events())[-1][0] == "turn.finished"
    assert not await database_sync_to_async(Turn.objects.filter(agent__name="bard").exists)()

    await answer.close()
    sent = await http(
        "POST", "/api/v1/agents/bard/messages", designer_key, {"content": "hello", "stream": True}
    )
    assert sent.status == 200
    assert (await sent.events())[-1][0] == "turn.finished"
    await database_sync_to_async(turn_cancel)(turn)
    await running
    await listener.disconnect()
