"""An agent through time on the pages, through Django's test client: the
timeline, the agent as of a block (and the blocks it cannot show), a fork
from there, the checkpoints with what each changed, export and import.
Of the nine-block story, played once for the module (conftest.py)."""

import html
import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.history.checkpoints import checkpoint_detail, checkpoints_detailed
from agents.models import Agent, Block, Turn
from billing.models import CostLine
from tests.support.agent_file import exported as read_export
from tests.support.time_story import DM, PAGE, STORE_AFTER, at, text

# Not transactional: the story is played once for the module (conftest.py).
pytestmark = pytest.mark.django_db

IMPORT = "/studio/ashmere/agents/import/"


def memories_shown(response) -> dict:
    """Each memory the page marks: name → (open?, content)."""
    page = response.content.decode()
    found = re.findall(r'data-memory="([^"]+)" data-open="(true|false)">.*?<pre[^>]*>(.*?)</pre>', page, re.S)
    return {name: (is_open == "true", html.unescape(content)) for name, is_open, content in found}


def upload(document, name="dm.studio-agent.json") -> SimpleUploadedFile:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return SimpleUploadedFile(name, body, content_type="application/json")


# --- the timeline ----------------------------------------------------------------------------


def test_the_agent_page_has_a_timeline_of_its_blocks_and_checkpoints(designer, story):
    page = designer.get(PAGE).content.decode()

    marks = re.findall(r'data-timeline-(block|checkpoint)="(\d+)"', page)
    assert marks == [
        *[("block", str(n)) for n in range(1, 5)],
        ("checkpoint", "1"),  # in force from block 5
        *[("block", str(n)) for n in range(5, 9)],
        ("checkpoint", "2"),  # from block 9
        ("block", "9"),
    ]
    assert f'href="{at(3)}" data-timeline-block="3"' in page


def test_each_block_of_the_history_links_to_it_as_of_then(designer, story):
    assert f'href="{at(9)}">As of block 9</a>' in designer.get(PAGE).content.decode()


def test_the_page_of_a_block_shows_the_store_as_that_block_left_it(designer, story):
    for number, expected in STORE_AFTER.items():
        response = designer.get(at(number))

        assert response.status_code == 200
        assert memories_shown(response) == expected, number


def test_the_page_of_a_block_shows_what_its_first_model_call_was_given_and_the_checkpoint(designer, story):
    page = text(designer.get(at(5)))

    assert "What block 5’s first model call was given" in page
    assert "Context block · 234 tokens, through block 3" in page
    assert "player I knock on the chapel door." in page  # block 4, verbatim after the checkpoint
    assert "Folds blocks 1–3" in page
    assert "What happened in block 5" in page
    before = text(designer.get(at(4)))
    assert "Context block · none yet" in before
    assert "No checkpoint yet" in before


def test_it_marks_the_block_shown_on_the_timeline(designer, story):
    page = designer.get(at(6)).content.decode()

    assert re.findall(r'data-timeline-block="(\d+)"\s+aria-current="page"', page) == ["6"]


def test_the_breadcrumb_of_a_block_leads_back_to_its_agent(designer, story):
    page = designer.get(at(6)).content.decode()

    assert '<a href="/studio/ashmere/agents/dm/">dm</a>' in page
    assert '<span aria-current="page">Block 6</span>' in page


def test_a_block_from_before_the_record_says_from_which_block_it_can_show(designer, story, agent):
    Agent.objects.filter(pk=agent.pk).update(recorded_from_block=3)

    response = designer.get(at(2))

    assert response.status_code == 409
    page = text(response)
    assert "The studio did not keep what changed in block 2." in page
    assert "See block 3 , the first it kept." in page
    assert 'data-memory="' not in response.content.decode()


def test_a_block_whose_context_was_not_kept_shows_its_store_and_says_so(designer, story):
    Block.objects.filter(number=6).update(revision=None)

    response = designer.get(at(6))

    assert response.status_code == 200
    assert memories_shown(response) == STORE_AFTER[6]
    assert "Block 6 of agent 'dm' did not record what its model was given" in text(response)


@pytest.mark.parametrize("number", [0, 10, 99999999999])
def test_a_block_the_agent_does_not_have_is_404(designer, story, number):
    response = designer.get(at(number))

    assert response.status_code == 404


def test_the_page_of_a_block_is_for_members_only(client, outsider_client, story):
    assert outsider_client.get(at(2)).status_code == 404
    assert client.get(at(2))["Location"] == f"/studio/login/?next={at(2)}"


def test_fork_from_here_makes_the_agent_as_of_the_block_and_goes_to_it(designer, story, api):
    response = designer.post(at(5), {"name": "dm-b"})

    assert response.status_code == 302
    assert response["Location"] == "/studio/ashmere/agents/dm-b/"
    flash = text(designer.get(response["Location"]))
    assert "Forked from dm as it stood when block 5 ended: dm-b plays on from there." in flash
    fork = Agent.objects.get(name="dm-b")
    assert fork.last_block == 5
    assert memories_shown(designer.get("/studio/ashmere/agents/dm-b/blocks/5/")) == STORE_AFTER[5]
    assert Agent.objects.get(name="dm").last_block == 9


def test_the_fork_form_offers_a_name(designer, story):
    assert 'value="dm-from-4"' in designer.get(at(4)).content.decode()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("dm", "There is already an agent named 'dm' in this game; choose another name."),
        ("not a name!", "is not a valid agent name"),
        ("import", "is the import route"),
        ("", "This field is required."),
    ],
)
def test_a_fork_name_that_cannot_be_is_shown_by_the_field(designer, story, name, says):
    response = designer.post(at(5), {"name": name})

    assert response.status_code == 400
    page = response.content.decode()
    assert says in html.unescape(page)
    assert re.search(r'<input type="text" name="name"[^>]*autofocus', page)
    assert Agent.objects.count() == 1


def test_a_block_that_cannot_be_shown_cannot_be_forked(designer, story, agent):
    Agent.objects.filter(pk=agent.pk).update(recorded_from_block=3)

    response = designer.post(at(2), {"name": "dm-b"})

    assert response.status_code == 409
    assert not Agent.objects.filter(name="dm-b").exists()


def test_an_outsider_cannot_fork(outsider_client, story):
    assert outsider_client.post(at(5), {"name": "dm-b"}).status_code == 404
    assert not Agent.objects.filter(name="dm-b").exists()


def test_the_checkpoints_page_shows_each_with_its_summary_changes_and_rewrites(designer, story):
    response = designer.get(PAGE + "checkpoints/")

    assert response.status_code == 200
    page = response.content.decode()
    assert re.findall(r'data-checkpoint="(\d+)"', page) == ["2", "1"]
    first = page[page.index('data-checkpoint="1"') :]
    assert '<div class="rewrite" data-rewrite="quest" data-applied="true">' in first
    assert "<del>− Find the silver key.</del>\n<ins>+ Cross the river.</ins>" in first
    second = page[: page.index('data-checkpoint="1"')]
    assert "None: every open memory was left as it was." in second
    assert "<ins>+ - user: I knock on the chapel door.</ins>" in second
    assert f'href="{at(9)}"' in second  # in force from block 9


def test_the_checkpoints_with_changes_are_each_as_the_api_gives_one(agent, story):
    details = [checkpoint_detail(agent, "2"), checkpoint_detail(agent, "1")]

    assert checkpoints_detailed(agent) == details
    assert checkpoints_detailed(agent, limit=1) == details[:1]


def test_export_downloads_the_agent_file(designer, api, story):
    response = designer.get(PAGE + "export/")

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="dm.studio-agent.json"'
    exported = read_export(response)
    from_api = read_export(api.get(f"{DM}/export"))
    assert {**exported, "exportedAt": None} == {**from_api, "exportedAt": None}


def test_an_admin_imports_an_agent_file_under_a_new_name(admin, api, story):
    document = read_export(api.get(f"{DM}/export"))

    response = admin.post(IMPORT, {"file": upload(document), "name": "dm-copy"})

    assert response.status_code == 302
    assert response["Location"] == "/studio/ashmere/agents/dm-copy/"
    assert "Imported dm-copy from its agent file." in text(admin.get(response["Location"]))
    copy = Agent.objects.get(name="dm-copy")
    assert copy.last_block == 9
    assert memories_shown(admin.get("/studio/ashmere/agents/dm-copy/blocks/3/")) == STORE_AFTER[3]
    assert not CostLine.objects.filter(turn_id__in=Turn.objects.filter(agent=copy).values("uuid")).exists()


def test_only_admins_are_offered_and_may_use_import(designer, api, story):
    document = read_export(api.get(f"{DM}/export"))

    assert "Import an agent file" not in designer.get("/studio/ashmere/agents/").content.decode()
    assert designer.post(IMPORT, {"file": upload(document), "name": "dm-copy"}).status_code == 403
    assert designer.get(IMPORT).status_code == 405
    assert not Agent.objects.filter(name="dm-copy").exists()


def _refused(admin, body) -> str:
    response = admin.post(IMPORT, body)
    assert response.status_code == 400
    assert "Import an agent file" in response.content.decode()
    return html.unescape(response.content.decode())


def test_an_import_under_a_taken_name_says_so_by_the_name(admin, api, story):
    document = read_export(api.get(f"{DM}/export"))

    page = _refused(admin, {"file": upload(document)})

    assert "There is already an agent named 'dm' in this game; choose another name." in page
    assert re.search(r'<input type="text" name="name"[^>]*autofocus', page)
    assert Agent.objects.count() == 1


def test_a_file_whose_parts_disagree_names_the_place(admin, api, story):
    document = read_export(api.get(f"{DM}/export"))
    document["blocks"][3]["folded"] = False

    page = _refused(admin, {"file": upload(document), "name": "dm-copy"})

    assert "blocks[3].folded: the newest checkpoint folds blocks through 7" in page


def test_a_file_over_the_body_limit_is_refused(admin, api, story, settings):
    document = read_export(api.get(f"{DM}/export"))
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096

    page = _refused(admin, {"file": upload(document), "name": "dm-copy"})

    assert "the studio imports agent files up to 4.0\xa0KB (STUDIO_MAX_BODY_BYTES)" in page
    assert not Agent.objects.filter(name="dm-copy").exists()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not json at all", "This file is not JSON"),
        ({"format": "studio.agent", "version": 2}, "this studio reads version 1 of the format, not 2"),
        ({"hello": "world"}, "This is not an agent file. An agent file is the JSON document an agent"),
        ([1, 2, 3], 'its top level says "format": "studio.agent" and "version": 1'),
        (b"[" * 100_000, "nested more than 100 levels deep"),
        (b"[" * 101 + b"]" * 101, "nested more than 100 levels deep"),
    ],
)
def test_a_bad_file_is_refused_saying_what_is_wrong(admin, agent, body, says):
    assert says in _refused(admin, {"file": upload(body), "name": "dm-copy"})
    assert not Agent.objects.filter(name="dm-copy").exists()


def test_no_file_is_asked_for(admin, agent):
    assert "This field is required." in _refused(admin, {"name": "dm-copy"})
