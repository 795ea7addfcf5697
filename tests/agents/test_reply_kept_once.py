"""A turn's reply is kept once: a played turn's in its block (the block's
closing assistant message), a transient turn's, which has no block, on the
turn. Every view of a turn shows it as before."""

import importlib

import pytest
from django.apps import apps

from agents.models import Block, Turn
from tests.conftest import call, script
from tests.support.agent_file import exported

DM = "/api/v1/agents/dm"
QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the key."}


def stored_reply(turn_id) -> str:
    return Turn.objects.values_list("reply", flat=True).get(uuid=turn_id)


def test_a_played_turns_reply_is_kept_in_its_block_only(agent, send):
    turn = send(script(call("close_memory", **QUEST), {"say": "Noted, the key."}))

    block = Block.objects.get(turn__uuid=turn["id"])
    assert turn["reply"] == "Noted, the key."
    assert block.entries[-1] == {"type": "message", "role": "assistant", "content": "Noted, the key."}
    assert stored_reply(turn["id"]) == ""


def test_a_transient_turn_keeps_its_own_reply(agent, send, api):
    turn = send("Who goes there?", transient=True)

    assert turn["reply"]
    assert stored_reply(turn["id"]) == turn["reply"]
    assert api.get(f"{DM}/turns/{turn['id']}").json()["turn"]["reply"] == turn["reply"]


def test_every_read_of_a_played_turn_shows_its_reply(agent, send, api):
    sent = send(script(call("close_memory", **QUEST), {"say": "Noted."}))
    plain = send("I open the door.")

    one = api.get(f"{DM}/turns/{sent['id']}").json()["turn"]
    listed = {turn["id"]: turn for turn in api.get(f"{DM}/turns").json()["turns"]}
    turns_in_file = [block["turn"] for block in exported(api.get(f"{DM}/export"))["blocks"]]

    assert one == sent
    assert listed[sent["id"]] == sent and listed[plain["id"]] == plain
    assert [turn["reply"] for turn in turns_in_file] == ["Noted.", plain["reply"]]


def test_a_reply_after_tool_steps_is_the_last_steps_text(agent, send, api):
    turn = send(script(call("close_memory", **QUEST), call("open_memory", name="quest"), {"say": "Done."}))

    assert api.get(f"{DM}/turns/{turn['id']}").json()["turn"]["reply"] == "Done."


def test_a_turn_that_failed_shows_no_reply(agent, send, api):
    turn = send(script(call("close_memory", **QUEST), {"fail": "the model broke"}, {"say": "never said"}))

    assert turn["status"] == "failed"
    assert api.get(f"{DM}/turns/{turn['id']}").json()["turn"]["reply"] == ""


def test_a_fork_keeps_each_reply_once_and_shows_it(agent, send, api):
    first = send(script({"say": "One."}))
    send("Two.")

    assert api.post(f"{DM}/fork", {"name": "dm-b", "atBlock": 2}, format="json").status_code == 201
    forked = api.get("/api/v1/agents/dm-b/turns").json()["turns"]

    assert sorted(turn["reply"] for turn in forked) == sorted([first["reply"], send_reply_of(api, 2)])
    assert set(Turn.objects.filter(agent__name="dm-b").values_list("reply", flat=True)) == {""}


def send_reply_of(api, block: int) -> str:
    history = api.get(f"{DM}/history").json()["blocks"]
    return history[block - 1]["entries"][-1]["content"]


# --- the migration that empties the copies kept before ----------------------------------------


@pytest.fixture
def migration():
    return importlib.import_module("agents.migrations.0013_reply_kept_once")


def test_the_migration_empties_each_copy_in_batches_and_keeps_a_reply_its_block_does_not_hold(
    agent, send, migration, monkeypatch
):
    turns = [send(f"Message {n}.") for n in range(5)]
    transient = send("Just asking.", transient=True)
    Turn.objects.exclude(is_transient=True).update(reply="")
    for turn in turns:  # as the studio kept them before
        Turn.objects.filter(uuid=turn["id"]).update(reply=turn["reply"])
    odd = Turn.objects.get(uuid=turns[0]["id"])
    Turn.objects.filter(pk=odd.pk).update(reply="Not what the block says.")
    monkeypatch.setattr(migration, "BATCH", 2)

    migration.reply_kept_once(apps, None)

    assert {stored_reply(t["id"]) for t in turns[1:]} == {""}
    assert stored_reply(turns[0]["id"]) == "Not what the block says."
    assert stored_reply(transient["id"]) == transient["reply"]


def test_the_migration_undone_puts_each_reply_back_on_its_turn(agent, send, migration):
    turns = [send(f"Message {n}.") for n in range(3)]

    migration.reply_from_block(apps, None)

    assert [stored_reply(t["id"]) for t in turns] == [t["reply"] for t in turns]
