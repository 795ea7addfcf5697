"""Replays on the pages, through Django's test client: "Replay from here…"
on the agent as of a block, the replay side by side, the agent's replays,
cancelling one, and "Use this definition" with its confirmation. (In
Chromium: tests/browser/test_replay_pages.py.)"""

import re

import pytest

from agents.models import Agent, Replay
from tests.support.time_story import PAGE, at, play, text

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def story(api, agent, studio_conf):
    return play(api, studio_conf)


def form_of(agent, **changes) -> dict:
    """The replay form as the page fills it for `agent`, with `changes`."""
    data = {
        "system_prompt": agent.system_prompt,
        "model": agent.model,
        "max_open_tokens": agent.max_open_tokens,
        "compaction_type": agent.compaction_type,
        "max_tokens": agent.max_tokens,
        "through": 9,
        **changes,
    }
    if agent.memory_enabled and "memory_enabled" not in changes:
        data["memory_enabled"] = "on"
    return {key: value for key, value in data.items() if value is not None}


def replay_path(replay: Replay) -> str:
    return f"{PAGE}replays/{replay.uuid}/"


def test_the_agent_as_of_a_block_offers_a_replay_with_its_definition_filled_in(designer, agent, story):
    response = designer.get(at(5))

    page = response.content.decode()
    assert response.status_code == 200
    assert 'data-action="replay"' in page
    assert f'action="{PAGE}blocks/5/replay/"' in page
    assert re.search(r'<textarea name="system_prompt"[^>]*>\s*You are the dungeon master.</textarea>', page)
    assert 'name="through" value="9"' in page
    assert 'name="model" value="scripted"' in page


def test_replaying_from_the_page_plays_the_changed_definition_and_shows_it_side_by_side(
    designer, agent, story
):
    response = designer.post(
        f"{PAGE}blocks/5/replay/", form_of(agent, system_prompt="You are a forgetful DM.")
    )

    replay = Replay.objects.get()
    assert response.status_code == 302 and response["Location"] == replay_path(replay)
    assert (replay.from_block, replay.through_block, replay.changes) == (
        5,
        9,
        {"systemPrompt": "You are a forgetful DM."},
    )
    page = designer.get(replay_path(replay))
    html = page.content.decode()
    assert 'data-replay-status="completed"' in html
    assert [int(n) for n in re.findall(r'data-replay-row="(\d+)"', html)] == [5, 6, 7, 8, 9]
    assert html.count('data-side="original"') >= 5 and html.count('data-side="replay"') >= 5
    assert "data-replay-playing" not in html  # it has ended: no "rows appear here as they are played"
    assert 'data-action="use-definition"' in html
    assert designer.get(replay_path(replay) + "?fragment=replay").status_code == 200


def test_a_replay_with_memory_off_marks_what_differs(designer, agent, story):
    designer.post(f"{PAGE}blocks/1/replay/", form_of(agent, memory_enabled=False, through=3))

    html = designer.get(replay_path(Replay.objects.get())).content.decode()

    assert 'data-change="memory"' in html
    assert 'data-memory-compared="quest" data-change="removed"' in html
    assert "tool calls differ" in html
    assert 'data-same-reply="true"' in html


def test_a_refused_replay_is_shown_on_the_form(designer, agent, story):
    over = designer.post(f"{PAGE}blocks/5/replay/", form_of(agent, max_open_tokens=20000))
    too_many = designer.post(f"{PAGE}blocks/1/replay/", form_of(agent, through=60))

    assert over.status_code == 400 and "must be below half of compaction.maxTokens" in text(over)
    assert too_many.status_code == 400
    assert "no block 60" in text(too_many) or "50 at most" in text(too_many)
    assert not Replay.objects.exists()


def test_using_the_replays_definition_asks_first_then_redefines_the_agent(designer, agent, story):
    designer.post(f"{PAGE}blocks/9/replay/", form_of(agent, system_prompt="You are a forgetful DM."))
    use = replay_path(Replay.objects.get()) + "use/"

    asked = designer.get(use)
    agent.refresh_from_db()
    assert asked.status_code == 200 and agent.system_prompt == "You are the dungeon master."
    assert 'data-action="confirm-use-definition"' in asked.content.decode()
    assert "System prompt" in text(asked)

    done = designer.post(use)

    agent.refresh_from_db()
    assert done.status_code == 302 and done["Location"] == PAGE
    assert agent.system_prompt == "You are a forgetful DM."
    assert agent.revisions.count() == 2
    assert Agent.objects.filter(game=agent.game).count() == 1  # the copy went when the replay ended


def test_the_agents_replays_are_listed_and_a_live_ones_copy_leads_back(designer, agent, story, studio_conf):
    studio_conf(COMPACTION_RUNNER="none")  # queued, and left so: its copy is there
    designer.post(f"{PAGE}blocks/9/replay/", form_of(agent))
    replay = Replay.objects.get()

    listed = designer.get(f"{PAGE}replays/")
    shown = designer.get(replay_path(replay)).content.decode()
    copy = designer.get(f"/studio/ashmere/agents/{replay.replay_agent.name}/blocks/8/")
    agents = designer.get("/studio/ashmere/agents/")

    assert "data-replay-playing" in shown and "Replaying blocks 9–9 of dm" in shown
    assert f'href="{replay_path(replay)}"' in listed.content.decode()
    assert f'href="/studio/ashmere/agents/{replay.replay_agent.name}/"' in shown
    assert copy.status_code == 200 and "data-replay-copy" in copy.content.decode()
    assert 'data-action="replay"' not in copy.content.decode()
    assert replay.replay_agent.name not in agents.content.decode()


def test_an_ended_replays_page_shows_its_rows_with_no_way_to_a_copy_that_is_gone(designer, agent, story):
    designer.post(f"{PAGE}blocks/8/replay/", form_of(agent, system_prompt="You are a forgetful DM."))
    replay = Replay.objects.get()

    html = designer.get(replay_path(replay)).content.decode()

    assert not Agent.objects.filter(name=replay.replay_agent_name).exists()
    assert [int(n) for n in re.findall(r'data-replay-row="(\d+)"', html)] == [8, 9]
    assert html.count('data-same-reply="true"') == 2
    assert replay.replay_agent_name not in html and "data-replay-copy-link" not in html
    assert 'data-memory-compared="npcs" data-change="same"' in html


def test_a_queued_replay_can_be_cancelled_from_its_page(designer, agent, story, studio_conf):
    studio_conf(COMPACTION_RUNNER="none")
    designer.post(f"{PAGE}blocks/9/replay/", form_of(agent))
    replay = Replay.objects.get()
    assert 'data-action="cancel-replay"' in designer.get(replay_path(replay)).content.decode()

    response = designer.post(replay_path(replay) + "cancel/")

    assert response.status_code == 302
    replay.refresh_from_db()
    assert replay.status == "cancelled"
    assert 'data-replay-status="cancelled"' in designer.get(replay_path(replay)).content.decode()


def test_an_outsider_sees_no_replay(outsider_client, designer, agent, story):
    designer.post(f"{PAGE}blocks/9/replay/", form_of(agent))
    path = replay_path(Replay.objects.get())

    for response in (
        outsider_client.get(path),
        outsider_client.get(path + "use/"),
        outsider_client.post(path + "use/"),
        outsider_client.post(path + "cancel/"),
        outsider_client.post(f"{PAGE}blocks/9/replay/", form_of(agent)),
    ):
        assert response.status_code == 404
    assert designer.get(f"{PAGE}replays/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_a_reply_the_replay_says_otherwise_is_marked_word_by_word(designer, agent, story, monkeypatch):
    from agents.providers.scripted import ScriptedProvider

    complete = ScriptedProvider.complete

    def mumbling(self, request, control):
        reply = complete(self, request, control)
        if "mumbles" in request.system and reply.text:
            reply.text = reply.text.replace("You said", "You mumbled")
        return reply

    monkeypatch.setattr(ScriptedProvider, "complete", mumbling)
    designer.post(f"{PAGE}blocks/8/replay/", form_of(agent, system_prompt="The master mumbles."))

    html = designer.get(replay_path(Replay.objects.get())).content.decode()

    rows = dict(re.findall(r'data-replay-row="(\d+)" data-same-reply="(\w+)"', html))
    assert rows == {"8": "false", "9": "false"}
    assert html.count("data-reply-diff") == 2
    assert "<del>said</del> <ins>mumbled</ins>" in html
