"""Every page draws a value against its budget by one rule (amber from 80%,
red past the whole) and says how long ago something happened the same way."""

import re
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agents.templatetags.agent_pages import when
from memories import store
from memories.tools import tool_run
from studio.pages.helpers import meter, time_ago

AGENT_PAGE = "/studio/ashmere/agents/dm/"
MEMORIES_PAGE = AGENT_PAGE + "memories/"
OPEN_BAR = re.compile(r'data-meter="open-tokens".*?class="bar-fill ?([a-z]*)"', re.S)


def open_bar_tone(client, url: str) -> str:
    match = OPEN_BAR.search(client.get(url).content.decode())
    assert match, f"no open-tokens bar on {url}"
    return match.group(1)


@pytest.mark.parametrize(("share", "tone"), [(0.5, ""), (0.85, "warn"), (1.0, "warn"), (1.5, "over")])
def test_the_agent_page_and_the_memories_page_colour_the_open_tokens_bar_alike(designer, define, share, tone):
    agent = define("dm")
    with transaction.atomic():
        # Two memories alike: past the budget together (as a compactor may
        # leave them), each one within it (no memory may be larger).
        content = "The player wants the silver key from the drowned chapel, and trusts nobody."
        for name in ("quest", "npcs"):
            tool_run(
                agent=agent,
                name="close_memory",
                arguments={"name": name, "description": "Now", "content": content},
            )
            tool_run(agent=agent, name="open_memory", arguments={"name": name})
    opened = store.open_tokens(agent)
    budget = round(opened / share)
    define("dm", max_open_tokens=budget)
    assert abs(opened / budget - share) < 0.04  # the share this case is about

    assert open_bar_tone(designer, AGENT_PAGE) == open_bar_tone(designer, MEMORIES_PAGE) == tone


def test_a_bar_turns_amber_at_80_percent_and_red_only_past_its_budget():
    assert [meter(value, 100)["state"] for value in (79, 80, 100, 101)] == ["", "warn", "warn", "over"]
    assert meter(5, 0)["state"] == ""


@pytest.mark.parametrize(
    ("age", "text"),
    # timesince puts a no-break space between a number and its unit.
    [
        (timedelta(seconds=50), "just now"),
        (timedelta(seconds=90), "1\u00a0minute ago"),
        (timedelta(hours=3, minutes=5), "3\u00a0hours ago"),
        (timedelta(seconds=-5), "just now"),  # another host's clock a little ahead
    ],
)
def test_how_long_ago_reads_in_its_largest_unit(age, text):
    now = timezone.now()

    assert time_ago(now - age, now) == text


def test_the_agent_pages_times_say_how_long_ago_as_every_other_page_does():
    moment = timezone.now() - timedelta(seconds=50)

    assert ">just now</time>" in when(moment)
    assert f">{time_ago(moment - timedelta(minutes=7))}</time>" in when(moment - timedelta(minutes=7))
