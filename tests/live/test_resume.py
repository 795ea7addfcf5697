"""Events a WebSocket client can resume: every event carries `seq` and
`at`; `?since=<seq>` replays what was missed from the agent's buffer, then
goes on live, with no gap and no duplicate; past the buffer the client is
told to re-read. The key may come as a subprotocol, and a connection whose
key or membership is gone is closed when it rejoins its groups."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from agents.consumers import CLOSE_REASONS
from studio.asgi import application
from studio.live import event_types, events
from studio.live.events import (
    BUFFER_SIZE,
    agent_events_buffer,
    agent_group,
    publish_game_event_on_commit,
    publish_on_commit,
)
from studio.models import ApiKey, Membership
from tests.support.events import probe, probe_n
from tests.support.live import (
    OPENED,
    QUEST,
    QUEST_EVENTS,
    buffered_until,
    connect,
    events_until,
    page_headers,
    session_cookie,
)
from tests.support.sending import turn_send

from ..conftest import call, page_user, script

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("event_buffers_cleared")]


def send(agent, content="hello"):
    return database_sync_to_async(turn_send)(agent=agent, content=content)


async def listen(key, since=None):
    communicator = await connect(
        "/ws/v1/agents/dm/events" + (f"?since={since}" if since is not None else ""), key=key
    )
    assert (await communicator.receive_json_from())["type"] == "hello"
    return communicator


def assert_in_order_without_gaps(events):
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


async def test_every_event_carries_a_growing_seq_and_the_utc_time_it_was_sent(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    listener = await listen(designer_key)
    before = datetime.now(UTC)

    await send(agent, script(QUEST))
    events = await events_until(listener, "turn.finished")

    assert [e["type"] for e in events] == QUEST_EVENTS
    assert_in_order_without_gaps(events)
    times = [datetime.fromisoformat(e["at"]) for e in events]
    assert all(t.utcoffset() == timedelta(0) for t in times)
    assert before <= times[0] <= times[-1] <= datetime.now(UTC)
    await listener.disconnect()


async def test_a_client_that_comes_back_with_since_gets_what_it_missed_then_live_events(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    listener = await listen(designer_key)
    await send(agent, "one")
    heard = await events_until(listener, "turn.finished")
    await listener.disconnect()

    missed = await send(agent, script(QUEST))  # while the client is away
    await buffered_until(agent, lambda e: e["type"] == "turn.finished" and e["turnId"] == str(missed.uuid))
    # A live turn runs while the client reconnects: its events may arrive
    # during the replay, and each must still come once, in order.
    live_turn = asyncio.ensure_future(send(agent, script(*[call("open_memory", name="nope")] * 5)))
    listener = await listen(designer_key, since=heard[-1]["seq"])
    replayed = await events_until(listener, "turn.finished")
    live = await events_until(listener, "turn.finished")
    await live_turn

    assert [e["type"] for e in replayed] == QUEST_EVENTS
    assert {e["turnId"] for e in replayed} == {str(missed.uuid)}
    assert [e["type"] for e in live] == ["turn.started", *["tool_call"] * 5, "reply.delta", "turn.finished"]
    assert_in_order_without_gaps(heard + replayed + live)
    await listener.disconnect()


async def test_hello_says_where_the_listener_starts_so_one_that_heard_nothing_can_resume(
    define, designer_key
):
    agent = await database_sync_to_async(define)("dm")
    first = await connect("/ws/v1/agents/dm/events", key=designer_key)
    assert (await first.receive_json_from())["seq"] is None  # the agent has no events yet
    await first.disconnect()
    await send(agent)
    await buffered_until(agent, lambda e: e["type"] == "turn.finished")
    head, _ = await database_sync_to_async(agent_events_buffer)(agent.pk)

    quiet = await connect("/ws/v1/agents/dm/events", key=designer_key)
    hello = await quiet.receive_json_from()
    await quiet.disconnect()  # drops before hearing anything
    missed = await send(agent, script(QUEST))
    await buffered_until(agent, lambda e: e["type"] == "turn.finished" and e["turnId"] == str(missed.uuid))
    listener = await listen(designer_key, since=hello["seq"])
    replayed = await events_until(listener, "turn.finished")

    assert hello["type"] == "hello" and hello["seq"] == head
    assert [e["type"] for e in replayed] == QUEST_EVENTS
    assert replayed[0]["seq"] == head + 1
    await listener.disconnect()


async def test_live_events_that_arrive_out_of_order_or_twice_reach_the_client_in_order_once(
    define, designer_key
):
    agent = await database_sync_to_async(define)("dm")
    listener = await listen(designer_key)
    await send(agent)
    heard = await events_until(listener, "turn.finished")
    layer = get_channel_layer()

    # Two events counted and buffered by other processes, whose live copies
    # come late and in the wrong order, the first of them twice.
    streams = events._buffers(layer)
    first, second = [await database_sync_to_async(streams.append)(agent.pk, probe(n)) for n in (1, 2)]
    for event in (second, first, first):
        await layer.group_send(agent_group(agent.pk), {"type": "studio.event", "event": event})
    await send(agent)
    after = await events_until(listener, "turn.finished")

    assert after[:2] == [first, second]
    assert_in_order_without_gaps(heard + after)
    await listener.disconnect()


async def _publish_many(agent_id, count):
    def publish():
        for n in range(count):
            publish_on_commit(agent_id, probe(n))

    await database_sync_to_async(publish)()


async def test_past_the_buffer_the_client_is_told_to_re_read_and_then_hears_live_events(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    await _publish_many(agent.pk, BUFFER_SIZE + 1)
    await buffered_until(agent, lambda e: probe_n(e) == BUFFER_SIZE)
    head, kept = await database_sync_to_async(agent_events_buffer)(agent.pk)
    assert [probe_n(e) for e in kept] == list(range(1, BUFFER_SIZE + 1))  # the first probe is gone

    # The oldest kept event is still reachable ...
    listener = await listen(designer_key, since=kept[0]["seq"] - 1)
    replayed = [await listener.receive_json_from() for _ in range(BUFFER_SIZE)]
    assert replayed == kept
    await listener.disconnect()

    # ... one before it is not: the client must re-read, then goes on live.
    listener = await listen(designer_key, since=kept[0]["seq"] - 2)
    resync = await listener.receive_json_from()
    assert resync["type"] == "resync" and resync["seq"] == head and resync["message"]
    await send(agent)
    live = await events_until(listener, "turn.finished")
    assert live[0]["type"] == "turn.started" and live[0]["seq"] == head + 1
    await listener.disconnect()


async def test_a_since_from_a_stream_that_is_gone_asks_for_a_re_read(define, designer_key):
    await database_sync_to_async(define)("dm")  # an agent that never had an event

    listener = await listen(designer_key, since=12)

    assert (await listener.receive_json_from())["type"] == "resync"
    await listener.disconnect()


@pytest.mark.parametrize("since", ["abc", "-1", "1.5", "", "9" * 30])
async def test_a_bad_since_is_refused_with_a_reason(define, designer_key, since):
    await database_sync_to_async(define)("dm")
    communicator = await connect(f"/ws/v1/agents/dm/events?since={since}", key=designer_key)

    error = await communicator.receive_json_from()
    assert error["type"] == "error" and error["code"] == "invalid_since" and "since" in error["message"]
    assert await communicator.receive_output(timeout=60) == {
        "type": "websocket.close",
        "code": 4400,
        "reason": CLOSE_REASONS[4400],
    }


async def test_a_key_offered_as_a_subprotocol_is_accepted_and_never_echoed(define, designer_key):
    agent = await database_sync_to_async(define)("dm")
    communicator = WebsocketCommunicator(
        application, "/ws/v1/agents/dm/events", subprotocols=["studio.v1", f"bearer.{designer_key}"]
    )

    connected, subprotocol = await communicator.connect(timeout=60)

    assert connected and subprotocol == "studio.v1"
    assert (await communicator.receive_json_from())["type"] == "hello"
    await send(agent)
    assert (await events_until(communicator, "turn.finished"))[0]["type"] == "turn.started"
    await communicator.disconnect()


async def test_a_wrong_key_offered_as_a_subprotocol_is_refused(define):
    await database_sync_to_async(define)("dm")
    communicator = WebsocketCommunicator(
        application, "/ws/v1/agents/dm/events", subprotocols=["studio.v1", "bearer.sk_nope_nope"]
    )
    OPENED.append(communicator)  # refused, its consumer still listens: disconnected at the end

    connected, subprotocol = await communicator.connect(timeout=60)

    assert subprotocol == "studio.v1"
    assert await communicator.receive_output(timeout=60) == {
        "type": "websocket.close",
        "code": 4401,
        "reason": CLOSE_REASONS[4401],
    }


def _revoke(key_text):
    prefix = key_text.split("_")[1]
    ApiKey.objects.filter(prefix=prefix).update(revoked_at=timezone.now())


def _delete(key_text):
    ApiKey.objects.filter(prefix=key_text.split("_")[1]).delete()


@pytest.mark.parametrize("take_away", [_revoke, _delete])
async def test_a_connection_whose_key_is_gone_is_closed_when_it_rejoins(
    define, designer_key, admin_key, studio_conf, take_away
):
    studio_conf(WS_REJOIN_SECONDS=0.05)
    agent = await database_sync_to_async(define)("dm")
    listener = await listen(designer_key)
    kept = await listen(admin_key)

    await database_sync_to_async(take_away)(designer_key)

    assert await listener.receive_output(timeout=60) == {
        "type": "websocket.close",
        "code": 4401,
        "reason": CLOSE_REASONS[4401],
    }
    # The other key's connection went through the same rejoins and still hears.
    await send(agent)
    assert (await events_until(kept, "turn.finished"))[0]["type"] == "turn.started"
    await kept.disconnect()


async def test_a_page_whose_user_left_the_game_is_closed_when_it_rejoins(define, game, studio_conf):
    studio_conf(WS_REJOIN_SECONDS=0.1)
    await database_sync_to_async(define)("dm")
    cookie = await database_sync_to_async(session_cookie)(game)
    page = await connect("/ws/studio/ashmere/agents/dm/", headers=page_headers(cookie))
    assert (await page.receive_json_from())["type"] == "hello"

    await database_sync_to_async(Membership.objects.filter(game=game).delete)()

    assert await page.receive_output(timeout=60) == {
        "type": "websocket.close",
        "code": 4401,
        "reason": CLOSE_REASONS[4401],
    }


def _sessions_of_one_member(game, count: int) -> list[bytes]:
    """The Cookie headers of `count` sessions of one member of `game`."""
    user, cookies = page_user("mara", game), []
    for _ in range(count):
        client = Client()
        client.force_login(user)
        cookies.append(f"sessionid={client.cookies['sessionid'].value}".encode())
    return cookies


def _sign_out(cookie: bytes):
    """Sign the session out as its browser would: the studio's own sign-out."""
    client = Client()
    client.cookies["sessionid"] = cookie.decode().partition("=")[2]
    assert client.post("/studio/logout/").status_code == 302


def _password_change(game):
    user = Membership.objects.get(game=game).user
    user.set_password("a-new-password-for-mara")
    user.save()


async def _page(cookie: bytes):
    page = await connect("/ws/studio/ashmere/agents/dm/", headers=page_headers(cookie))
    assert (await page.receive_json_from())["type"] == "hello"
    return page


async def test_a_page_whose_session_signed_out_is_closed_when_it_rejoins(define, game, studio_conf):
    studio_conf(WS_REJOIN_SECONDS=0.1)
    agent = await database_sync_to_async(define)("dm")
    signing_out, staying = await database_sync_to_async(_sessions_of_one_member)(game, 2)
    page, other_page = await _page(signing_out), await _page(staying)

    await database_sync_to_async(_sign_out)(signing_out)

    assert await page.receive_output(timeout=60) == {
        "type": "websocket.close",
        "code": 4401,
        "reason": CLOSE_REASONS[4401],
    }
    # The same user's other session went through the same rejoins and still hears.
    await send(agent)
    assert (await events_until(other_page, "turn.finished"))[0]["type"] == "turn.started"
    for communicator in (page, other_page):
        await communicator.disconnect()


async def test_a_page_whose_users_password_changed_is_closed_when_it_rejoins(define, game, studio_conf):
    studio_conf(WS_REJOIN_SECONDS=0.1)
    await database_sync_to_async(define)("dm")
    (cookie,) = await database_sync_to_async(_sessions_of_one_member)(game, 1)
    page = await _page(cookie)

    # Django's sessions of a user end when the password changes (the session auth hash).
    await database_sync_to_async(_password_change)(game)

    assert await page.receive_output(timeout=60) == {
        "type": "websocket.close",
        "code": 4401,
        "reason": CLOSE_REASONS[4401],
    }
    await page.disconnect()


async def test_a_game_wide_event_comes_in_each_agents_own_order(define, game, designer_key):
    dm = await database_sync_to_async(define)("dm")
    await database_sync_to_async(define)("bard")
    listener = await listen(designer_key)
    bard = await connect("/ws/v1/agents/bard/events", key=designer_key)
    await bard.receive_json_from()
    await send(dm)
    heard = await events_until(listener, "turn.finished")

    await database_sync_to_async(publish_game_event_on_commit)(
        game.pk, event_types.budget_low_cap(agent=None, monthly_cap="10", month_spent="8", balance="2")
    )

    low = await listener.receive_json_from(timeout=60)
    bards_low = await bard.receive_json_from(timeout=60)
    assert low["type"] == bards_low["type"] == "budget.low"
    assert_in_order_without_gaps(heard + [low])
    assert bards_low["seq"] and bards_low["at"]
    # A client that missed it gets it back like any other event.
    await listener.disconnect()
    listener = await listen(designer_key, since=heard[-1]["seq"])
    assert await listener.receive_json_from(timeout=60) == low
    await listener.disconnect()
    await bard.disconnect()
