"""A studio page whose socket drops comes back where it left off: it
reconnects with `?since=` the last event it heard, is sent what it missed
and re-renders only the parts those events touch; when the studio no longer
has them (`resync`), it re-renders every live part."""

import re

import pytest
from django.conf import settings
from playwright.sync_api import expect

from studio.live.events import agent_events_buffer
from studio.runtime.redisconn import redis_client
from tests.conftest import events_published
from tests.support.browser import block, open_live
from tests.support.sending import turn_send

from .conftest import settled

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("event_buffers_cleared")]

# What the page heard and which of its live parts it re-rendered, in order.
RECORD = """
window.heard = [];
window.rendered = [];
document.addEventListener("studio:event", (e) => window.heard.push(e.detail.type));
document.addEventListener("studio:fragment", (e) => window.rendered.push(e.detail.name));
"""
EVERY_PART = {"history", "stats", "context", "timeline", "checkpoint", "compactions"}
# The parts a turn's events touch on the agent page.
A_TURNS_PARTS = {"history", "stats", "context", "timeline"}


def newest_seq(agent) -> int:
    return agent_events_buffer(agent.pk)[0]


def turn_played_while_away(agent, content, *, forget_the_stream=False):
    """A turn the page cannot hear (it has no socket): its events are in the
    agent's buffer when this returns — or, with `forget_the_stream`, the
    buffer the page would resume from is gone first (Redis lost it)."""
    if forget_the_stream:
        for key in redis_client().scan_iter(match=f"{settings.CHANNEL_PREFIX}:events:{agent.pk}*"):
            redis_client().delete(key)
    turn_send(agent=agent, content=content)
    # Its events are stamped by the publisher's thread behind the commit:
    # waited for, not looked for (the buffer just emptied has none at first).
    events_published()


def test_a_page_whose_socket_drops_resumes_from_the_last_event_it_heard(signed_in, agent):
    page = signed_in
    page.add_init_script(RECORD)
    sockets = []

    def route(socket):
        # A reconnect: the page missed a turn while it had no socket.
        if len(sockets) == 1:
            turn_played_while_away(agent, "Are you still there?")
        if len(sockets) == 2:
            turn_played_while_away(agent, "And now?", forget_the_stream=True)
        sockets.append(socket)
        socket.connect_to_server()

    page.route_web_socket(re.compile(r"/ws/studio/"), route)
    open_live(page)
    settled(page)
    turn_send(agent=agent, content="Hello.")
    expect(block(page, 1)).to_be_visible()
    page.wait_for_function("window.heard.includes('turn.finished')")
    heard_last = newest_seq(agent)

    page.evaluate("window.heard = []; window.rendered = []")
    sockets[0].close(code=1012)

    expect(block(page, 2)).to_contain_text("Are you still there?")
    assert sockets[1].url.endswith(f"/ws/studio/ashmere/agents/dm/?since={heard_last}")
    page.wait_for_function(f"{sorted(A_TURNS_PARTS)}.every((part) => window.rendered.includes(part))")
    heard = page.evaluate("window.heard")
    assert heard[0] == "hello" and heard[1] == "turn.started" and heard[-1] == "turn.finished", heard
    page.wait_for_timeout(300)  # a part re-rendered for nothing would be back by now
    assert set(page.evaluate("window.rendered")) == A_TURNS_PARTS

    heard_last = newest_seq(agent)
    page.evaluate("window.heard = []; window.rendered = []")
    sockets[1].close(code=1012)

    expect(block(page, 3)).to_contain_text("And now?")
    assert sockets[2].url.endswith(f"?since={heard_last}")
    page.wait_for_function(f"{sorted(EVERY_PART)}.every((part) => window.rendered.includes(part))")
    assert page.evaluate("window.heard")[:2] == ["hello", "resync"]
    expect(page.locator("[data-live-status]")).to_have_text("live")
