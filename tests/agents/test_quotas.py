"""Quotas per game, so no tenant can take what the others share: agents
(STUDIO_MAX_AGENTS_PER_GAME, 403 `quota_exceeded`) and turns live at once
across a game's agents (STUDIO_MAX_LIVE_TURNS_PER_GAME, 429 `game_busy`
with Retry-After, at once) — each counted exactly, another game untouched."""

import pytest

from agents.models import Agent, Turn, TurnStatus
from billing import ledger
from billing.models import Account
from studio.auth.throttles import definition_window, window_clear
from tests.support.agent_file import exported as read_export
from tests.support.pages import CONFIG, html
from tests.support.sending import turn_send

from ..conftest import error_of, script, wait_for

SLOW = script({"sleep": 3}, {"say": "done"})


def test_past_its_agent_quota_a_game_cannot_define_a_new_agent(api, outsider, studio_conf):
    studio_conf(MAX_AGENTS_PER_GAME=2)
    for name in ("dm", "npc"):
        assert api.put(f"/api/v1/agents/{name}", {}, format="json").status_code == 201

    refused = api.put("/api/v1/agents/ferryman", {}, format="json")

    assert refused.status_code == 403
    error = error_of(refused)
    assert error["code"] == "quota_exceeded" and "2 agents" in error["message"]
    assert not Agent.objects.filter(name="ferryman").exists()
    # Redefining one it has is not a new agent; another game has its own quota.
    assert api.put("/api/v1/agents/dm", {"systemPrompt": "Again."}, format="json").status_code == 200
    assert outsider.put("/api/v1/agents/ferryman", {}, format="json").status_code == 201


def test_deleting_an_agent_makes_room_for_another(api, admin_api, studio_conf):
    studio_conf(MAX_AGENTS_PER_GAME=1)
    api.put("/api/v1/agents/dm", {}, format="json")
    assert api.put("/api/v1/agents/npc", {}, format="json").status_code == 403

    admin_api.delete("/api/v1/agents/dm")

    assert api.put("/api/v1/agents/npc", {}, format="json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_past_its_live_turn_quota_a_send_is_refused_at_once_and_other_games_go_on(
    api, outsider, define, game, studio_conf
):
    studio_conf(MAX_LIVE_TURNS_PER_GAME=2)
    for name in ("a", "b", "c"):
        define(name)
    outsider.put("/api/v1/agents/x", {}, format="json")
    for name in ("a", "b"):
        sent = api.post(f"/api/v1/agents/{name}/messages", {"content": SLOW, "wait": False}, format="json")
        assert sent.status_code == 202

    refused = api.post("/api/v1/agents/c/messages", {"content": "Hello?"}, format="json")

    assert refused.status_code == 429
    assert error_of(refused)["code"] == "game_busy"
    assert int(refused["Retry-After"]) >= 1
    assert not Turn.objects.filter(agent__name="c").exists()
    assert Account.objects.get(game=game).live_turns == 2
    other = outsider.post("/api/v1/agents/x/messages", {"content": "Hello?"}, format="json")
    assert other.status_code == 200

    wait_for(lambda: not Turn.objects.filter(status__in=[TurnStatus.QUEUED, TurnStatus.RUNNING]).exists())
    assert api.post("/api/v1/agents/c/messages", {"content": "Now?"}, format="json").status_code == 200
    assert Account.objects.get(game=game).live_turns == 0
    assert all(check.is_consistent for check in ledger.ledger_check())


@pytest.mark.django_db(transaction=True)
def test_queued_sends_count_as_live_turns(api, define, studio_conf):
    studio_conf(MAX_LIVE_TURNS_PER_GAME=2)
    define("dm")
    first = api.post("/api/v1/agents/dm/messages", {"content": SLOW, "wait": False}, format="json")
    queued = api.post("/api/v1/agents/dm/messages", {"content": "next", "wait": False}, format="json")
    assert (first.status_code, queued.json()["turn"]["status"]) == (202, "queued")

    refused = api.post("/api/v1/agents/dm/messages", {"content": "and another"}, format="json")

    assert refused.status_code == 429 and error_of(refused)["code"] == "game_busy"
    api.post(f"/api/v1/agents/dm/turns/{first.json()['turn']['id']}/cancel")
    wait_for(lambda: not Turn.objects.filter(status__in=[TurnStatus.QUEUED, TurnStatus.RUNNING]).exists())
    assert all(check.is_consistent for check in ledger.ledger_check())


def test_checkledger_finds_a_live_turn_count_that_drifted(agent, game, send):
    send("hello")
    Account.objects.filter(game=game).update(live_turns=3)

    (check,) = ledger.ledger_check()

    assert not check.is_consistent
    assert (check.live_turns, check.expected_live_turns) == (3, 0)


def test_a_fork_and_an_import_count_as_new_agents(api, admin_api, define, studio_conf):
    agent = define("dm")
    turn_send(agent=agent, content="One block to fork from.")
    exported = read_export(api.get("/api/v1/agents/dm/export"))
    studio_conf(MAX_AGENTS_PER_GAME=1)

    forked = api.post("/api/v1/agents/dm/fork", {"name": "dm-b", "atBlock": 1}, format="json")
    imported = admin_api.post("/api/v1/agents/import", {**exported, "name": "dm-c"}, format="json")

    assert (forked.status_code, error_of(forked)["code"]) == (403, "quota_exceeded")
    assert (imported.status_code, error_of(imported)["code"]) == (403, "quota_exceeded")
    assert list(Agent.objects.values_list("name", flat=True)) == ["dm"]


def test_forks_are_paced_like_sends(api, define, studio_conf):
    agent = define("dm")
    turn_send(agent=agent, content="One block to fork from.")
    studio_conf(SEND_RATE=(2, 60))

    answers = [
        api.post("/api/v1/agents/dm/fork", {"name": f"dm-{n}", "atBlock": 1}, format="json") for n in range(3)
    ]

    assert [a.status_code for a in answers] == [201, 201, 429]
    assert int(answers[2]["Retry-After"]) >= 1


def test_definitions_that_write_are_paced_per_game_and_one_that_changes_nothing_is_not(
    api, outsider, game, other_game, studio_conf
):
    for each in (game, other_game):  # SQLite gives a flushed game's id out again
        window_clear(definition_window(each.pk))
    studio_conf(DEFINITION_RATE=(2, 60))
    made = api.put("/api/v1/agents/dm", {}, format="json")
    changed = api.put("/api/v1/agents/dm", {"systemPrompt": "Again."}, format="json")

    refused = api.put("/api/v1/agents/dm", {"systemPrompt": "And again."}, format="json")
    same = [api.put("/api/v1/agents/dm", {"systemPrompt": "Again."}, format="json") for _ in range(5)]

    assert (made.status_code, changed.status_code) == (201, 200)
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    error = error_of(refused)
    assert error["code"] == "rate_limited" and "STUDIO_DEFINITION_RATE" in error["message"]
    assert [r.status_code for r in same] == [200] * 5
    agent = Agent.objects.get(name="dm")
    assert (agent.system_prompt, agent.revision, agent.revisions.count()) == ("Again.", 2, 2)
    assert api.put("/api/v1/agents/npc", {}, format="json").status_code == 429  # a new agent is a definition
    assert outsider.put("/api/v1/agents/dm", {}, format="json").status_code == 201  # another game's own pace


def test_forks_imports_and_page_edits_are_paced_with_the_games_definitions(
    api, admin_api, designer, define, studio_conf
):
    agent = define("dm")
    turn_send(agent=agent, content="One block to fork from.")
    exported = read_export(api.get("/api/v1/agents/dm/export"))
    studio_conf(DEFINITION_RATE=(1, 60))  # the one its definition took

    forked = api.post("/api/v1/agents/dm/fork", {"name": "dm-b", "atBlock": 1}, format="json")
    imported = admin_api.post("/api/v1/agents/import", {**exported, "name": "dm-c"}, format="json")
    edited = designer.post("/studio/ashmere/agents/dm/", {**CONFIG, "system_prompt": "Someone else."})

    assert (forked.status_code, error_of(forked)["code"]) == (429, "rate_limited")
    assert (imported.status_code, error_of(imported)["code"]) == (429, "rate_limited")
    assert edited.status_code == 400 and "faster than the studio allows" in html(edited)
    assert list(Agent.objects.values_list("name", flat=True)) == ["dm"]
    assert Agent.objects.get().revisions.count() == 1


def test_an_import_into_a_full_game_is_refused_before_its_file_is_read(admin_api, define, studio_conf):
    define("dm")
    studio_conf(MAX_AGENTS_PER_GAME=1)

    refused = admin_api.post("/api/v1/agents/import", b"{not even json", content_type="application/json")

    assert (refused.status_code, error_of(refused)["code"]) == (403, "quota_exceeded")


@pytest.mark.django_db(transaction=True)
def test_turns_whose_process_died_do_not_keep_a_game_busy(api, define, game, studio_conf):
    from datetime import timedelta

    from django.utils import timezone

    studio_conf(MAX_LIVE_TURNS_PER_GAME=1)
    agent = define("dm")
    Turn.objects.create(
        agent=agent, status=TurnStatus.RUNNING, lease_until=timezone.now() - timedelta(minutes=1)
    )
    Account.objects.filter(game=game).update(live_turns=1)  # as its send counted it

    sent = api.post("/api/v1/agents/dm/messages", {"content": "Anyone?"}, format="json")

    assert sent.status_code == 200, sent.content
    assert Account.objects.get(game=game).live_turns == 0
    assert all(check.is_consistent for check in ledger.ledger_check())
