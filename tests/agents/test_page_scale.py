"""An agent page that scales, through Django's test client: sections to
jump between, a timeline of hundreds of blocks in ranges, a hint that
follows the form, an import error that says what an agent file is, and
token counts labelled so they do not seem to contradict. (In Chromium:
tests/browser/test_agent_lifecycle.py.)"""

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.pages.view_models import TIMELINE_RANGE
from tests.conftest import call, error_of, script
from tests.support.browser import blocks_made
from tests.support.pages import html
from tests.support.sending import turn_send

PAGE = "/studio/ashmere/agents/dm/"


# --- sections ----------------------------------------------------------------------------------


def test_the_agent_page_has_a_section_nav_whose_links_each_reach_a_section(designer, agent):
    page = html(designer.get(PAGE))

    nav = re.search(
        r"<nav class=\"section-nav\"[^>]*aria-label=\"Sections of this page\"[^>]*>(.*?)</nav>", page, re.S
    )
    assert nav, "no section nav"
    targets = re.findall(r'href="#([\w-]+)"', nav.group(1))
    assert targets == ["timeline", "send", "history", "context", "checkpoint", "compaction", "config"]
    for target in targets:
        assert len(re.findall(rf'\bid="{target}"', page)) == 1, f"#{target} is not one section of the page"


# --- the timeline ------------------------------------------------------------------------------


def test_a_timeline_of_few_blocks_is_one_row(designer, agent):
    blocks_made(agent, TIMELINE_RANGE)

    page = html(designer.get(PAGE + "?fragment=timeline"))

    assert "data-timeline-range" not in page
    assert page.count("data-timeline-block=") == TIMELINE_RANGE


def test_a_timeline_of_200_blocks_is_grouped_in_ranges_the_newest_open(designer, agent):
    blocks_made(agent, 200, failed={7, 120})

    page = html(designer.get(PAGE + "?fragment=timeline"))

    ranges = re.findall(
        r'<details class="timeline-range" id="([^"]+)" data-timeline-range="([^"]+)"( open)?>', page
    )
    assert [(r[1], bool(r[2])) for r in ranges] == [
        ("1-50", False),
        ("51-100", False),
        ("101-150", False),
        ("151-200", True),
    ]
    assert page.count("data-timeline-block=") == 200
    summaries = [
        " ".join(re.sub(r"<[^>]+>", " ", s).split()) for s in re.findall(r"<summary>(.*?)</summary>", page)
    ]
    assert summaries == [
        "Blocks 1–50 · 1 failed",
        "Blocks 51–100",
        "Blocks 101–150 · 1 failed",
        "Blocks 151–200",
    ]


def test_the_agent_as_of_a_block_opens_the_range_of_that_block(designer, agent):
    blocks_made(agent, 120)

    page = html(designer.get(PAGE + "blocks/30/"))

    opened = re.findall(r'data-timeline-range="([^"]+)" open>', page)
    assert opened == ["1-50"]
    assert re.search(r'data-timeline-block="30"\s+aria-current="page"', page)


def test_the_newest_200_of_more_start_their_first_range_where_they_start(designer, agent):
    blocks_made(agent, 236)

    page = html(designer.get(PAGE + "?fragment=timeline"))

    ranges = re.findall(r'data-timeline-range="([^"]+)"', page)
    assert ranges == ["37-50", "51-100", "101-150", "151-200", "201-236"]


# --- the form's hint ---------------------------------------------------------------------------


def test_the_rule_hint_names_the_field_it_follows(designer, agent):
    page = html(designer.get("/studio/ashmere/agents/"))

    hint = re.search(
        r'<span data-rule-limit data-from="#([^"]+)"[^>]*> \(now: <span data-rule-limit-value>([^<]+)</span>',
        page,
    )
    assert hint and hint.group(2) == "15,999"  # the new agent's default maxTokens, 32,000
    assert re.search(
        rf'<input [^>]*id="{hint.group(1)}"[^>]*name="max_tokens"|<input [^>]*name="max_tokens"[^>]*id="{hint.group(1)}"',
        page,
    )


# --- importing something that is no agent file --------------------------------------------------


@pytest.mark.parametrize("body", [{"hello": "world"}, [1, 2], "a string"])
def test_importing_json_that_is_no_agent_file_says_what_an_agent_file_is(admin, admin_api, agent, body):
    upload = SimpleUploadedFile("hello.json", json.dumps(body).encode(), content_type="application/json")

    page = html(admin.post("/studio/ashmere/agents/import/", {"file": upload}))
    answered = admin_api.post("/api/v1/agents/import", body, format="json")

    assert "This is not an agent file." in page and "is not a field here" not in page
    assert "Export" in page and "&quot;format&quot;: &quot;studio.agent&quot;" in page
    assert answered.status_code == 400
    assert error_of(answered)["code"] == "invalid_agent_file"
    assert error_of(answered)["message"].startswith("This is not an agent file.")


# --- token counts that say what they count ------------------------------------------------------


def test_a_blocks_tokens_and_its_model_lines_tokens_say_what_each_counts(designer, agent):
    turn_send(
        agent=agent, content=script(call("close_memory", name="quest", description="d", content="Key."))
    )

    page = html(designer.get(PAGE + "?fragment=history"))

    assert re.search(r"data-block-tokens[^>]*>[\d,]+ tokens in history<", page)
    model = re.search(r'<tr data-cost="model">.*?</tr>', page, re.S).group(0)
    assert re.search(r"[\d,]+ tokens sent and received", model)
