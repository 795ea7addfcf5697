"""Retention (`manage.py prune`): what it deletes once past keeping, what it
leaves (by default, everything a designer can look at), and time travel
after it — what it can still show it shows as before, and what it can no
longer show it refuses with 409 `history_pruned`.

The story is the nine blocks of time_story.py and three more: block 10,
block 11 opens `bells`, a compaction asked for then folds blocks 1–10 (checkpoint
3, in force from block 12), and block 12 rewrites `bells`. Blocks 11 and
12 are never folded, so a prune keeps them."""

import io
import re
import threading
from datetime import timedelta
from decimal import Decimal
from uuid import UUID

import pytest
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from agents.history import retention
from agents.models import Agent, Block, Checkpoint, Replay, Turn
from billing.models import Account, CostLine
from memories.models import MemoryEvent, StoreBaseline
from tests.support.agent_file import exported as read_export
from tests.support.sending import turn_send
from tests.support.time_story import DM, PAGE, at, play

from ..conftest import UNTIL_CANCELLED, call, error_of, in_thread, script, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

BELLS_AT_DAWN = {"name": "bells", "description": "The chapel bells", "content": "They ring at dawn."}
# Every time-travel read of the story, and its checkpoints, by path.
READS = [
    *(f"{DM}/memories?atBlock={n}" for n in range(1, 13)),
    *(f"{DM}/context?atBlock={n}" for n in range(1, 13)),
    *(f"{DM}/checkpoints/{n}" for n in range(1, 4)),
    f"{DM}/checkpoints",
    *(f"{DM}/memories/{name}/history" for name in ("quest", "npcs", "bells")),
    f"{DM}/memories",
    f"{DM}/context",
]


@pytest.fixture
def story(api, agent, studio_conf):
    play(api, studio_conf)
    api.post(f"{DM}/messages", {"content": "The bells fall silent."}, format="json")
    api.post(f"{DM}/messages", {"content": script(call("open_memory", name="bells"))}, format="json")
    assert api.post(f"{DM}/compact").status_code == 202
    sent = {"content": script(call("close_memory", name="bells", content=BELLS_AT_DAWN["content"]))}
    assert api.post(f"{DM}/messages", sent, format="json").status_code == 200
    assert list(Checkpoint.objects.values_list("through_block", "from_block")) == [(3, 5), (7, 9), (10, 12)]
    return agent


def aged(days: int) -> None:
    """Every record as if made `days` ago."""
    then = timezone.now() - timedelta(days=days)
    for model in (Block, Turn, MemoryEvent, CostLine, Checkpoint):
        model.objects.update(created_at=then)


def answers(api) -> dict:
    """Every read of READS: its status and body."""
    return {path: (r.status_code, r.json()) for path in READS if (r := api.get(path))}


def prune(*, dry_run=False) -> str:
    out = io.StringIO()
    call_command("prune", *(["--dry-run"] if dry_run else []), stdout=out)
    return out.getvalue()


def counts() -> dict:
    models = (Block, Turn, MemoryEvent, CostLine, Session, StoreBaseline)
    return {
        **{model.__name__: model.objects.count() for model in models},
        "emptied checkpoints": Checkpoint.objects.exclude(pruned_at=None).count(),
        "idempotency keys": Turn.objects.exclude(idempotency_key=None).count(),
        "pruned through": list(Agent.objects.values_list("history_pruned_through", flat=True)),
    }


def pruned_sentence(response) -> str:
    assert response.status_code == 409, response.content
    error = error_of(response)
    assert error["code"] == "history_pruned"
    assert re.search(r"pruned on \d{4}-\d{2}-\d{2}", error["message"]) or "emptied on" in error["message"]
    return error["message"]


# --- by default ------------------------------------------------------------------------------


def test_by_default_prune_deletes_nothing_a_designer_can_reach(api, story):
    aged(400)
    before, kept = answers(api), counts()

    prune()

    assert counts() == kept
    assert answers(api) == before
    assert api.get(f"{DM}/export").status_code == 200


def test_idempotency_keys_are_cleared_after_their_24_hours_and_the_turns_kept(api, agent):
    def sent(key):
        return api.post(f"{DM}/messages", {"content": key}, format="json", HTTP_IDEMPOTENCY_KEY=key).json()

    old, new = sent("old-key")["turn"], sent("new-key")["turn"]
    Turn.objects.filter(uuid=old["id"]).update(created_at=timezone.now() - timedelta(hours=25))

    prune()

    assert set(Turn.objects.exclude(idempotency_key=None).values_list("idempotency_key", flat=True)) == {
        "new-key"
    }
    assert Turn.objects.get(uuid=old["id"]).request_digest == ""
    assert sent("new-key")["turn"]["id"] == new["id"]
    assert sent("old-key")["turn"]["id"] not in (old["id"], new["id"])


def test_expired_sessions_are_cleared_and_live_ones_kept(db):
    now = timezone.now()
    Session.objects.create(session_key="gone" * 8, session_data="", expire_date=now - timedelta(seconds=1))
    Session.objects.create(session_key="kept" * 8, session_data="", expire_date=now + timedelta(days=1))

    prune()

    assert list(Session.objects.values_list("session_key", flat=True)) == ["kept" * 8]


# --- folded history ------------------------------------------------------------------------------


def test_folded_history_past_keeping_goes_with_its_turns_and_what_is_kept_answers_as_before(
    api, story, studio_conf
):
    studio_conf(RETAIN_HISTORY_DAYS=30)
    aged(40)
    before = answers(api)
    kept_turns = set(Block.objects.filter(number__gt=10).values_list("turn__uuid", flat=True))

    prune()

    assert list(Block.objects.values_list("number", flat=True)) == [11, 12]
    assert set(Turn.objects.values_list("uuid", flat=True)) == kept_turns
    assert Agent.objects.get().history_pruned_through == 10
    # Checkpoint 1 is emptied; 2, which 3 is compared with, and 3, in force, are whole.
    assert [c.pruned_at is not None for c in Checkpoint.objects.order_by("id")] == [True, False, False]
    after = answers(api)
    for path in (f"{DM}/memories?atBlock=11", f"{DM}/memories?atBlock=12", f"{DM}/context?atBlock=12"):
        assert after[path] == before[path], path
    assert after[f"{DM}/checkpoints/3"] == before[f"{DM}/checkpoints/3"]
    assert after[f"{DM}/checkpoints"] == before[f"{DM}/checkpoints"]  # every number kept
    assert after[f"{DM}/memories"] == before[f"{DM}/memories"]
    assert after[f"{DM}/context"] == before[f"{DM}/context"]
    assert after[f"{DM}/memories/quest/history"] == before[f"{DM}/memories/quest/history"]


def test_every_time_travel_read_of_a_pruned_block_is_409_history_pruned(api, story, studio_conf):
    studio_conf(RETAIN_HISTORY_DAYS=30)
    aged(40)
    prune()

    for number in range(1, 11):
        for path in ("memories", "context"):
            message = pruned_sentence(api.get(f"{DM}/{path}?atBlock={number}"))
            assert f"Block {number} of agent 'dm'" in message
            assert "history through block 10 was pruned on" in message
            assert "Blocks from 11 on can" in message
        pruned_sentence(api.post(f"{DM}/fork", {"name": f"dm-{number}", "atBlock": number}, format="json"))
    # Block 11 was given checkpoint 2, and blocks 8-10 verbatim: those are gone.
    assert "was given the blocks after block 7 verbatim" in pruned_sentence(
        api.get(f"{DM}/context?atBlock=11")
    )
    assert "Checkpoint 1 of agent 'dm' was emptied on" in pruned_sentence(api.get(f"{DM}/checkpoints/1"))
    assert "what checkpoint 2 changed since it" in pruned_sentence(api.get(f"{DM}/checkpoints/2"))
    # A file carries the whole history: neither an export nor a fork of a kept block.
    pruned_sentence(api.get(f"{DM}/export"))
    pruned_sentence(api.post(f"{DM}/fork", {"name": "dm-12", "atBlock": 12}, format="json"))
    assert api.get(f"{DM}/memories?atBlock=13").status_code == 404
    assert not Agent.objects.filter(name__startswith="dm-").exists()


def test_the_pages_through_time_refuse_a_pruned_block_and_show_what_is_kept(designer, story, studio_conf):
    studio_conf(RETAIN_HISTORY_DAYS=30)
    aged(40)
    prune()

    pruned = designer.get(at(5))
    kept = designer.get(at(12)).content.decode()
    given_pruned = designer.get(at(11)).content.decode()
    checkpoints = designer.get(f"{PAGE}checkpoints/").content.decode()

    assert pruned.status_code == 409
    assert 'data-refusal="history_pruned"' in pruned.content.decode()
    assert 'data-memory="bells"' in kept and "data-refusal" not in kept
    assert 'data-memory="bells"' in given_pruned and 'data-refusal="history_pruned"' in given_pruned
    assert checkpoints.count('data-refusal="history_pruned"') == 2
    assert 'id="checkpoint-3-block"' in checkpoints
    assert designer.get(f"{PAGE}export/").status_code == 409
    assert designer.get(PAGE).status_code == 200


def test_a_second_prune_goes_on_from_where_the_first_left(api, story, studio_conf):
    studio_conf(RETAIN_HISTORY_DAYS=30)
    Block.objects.filter(number__lte=4).update(created_at=timezone.now() - timedelta(days=40))
    prune()
    assert list(Block.objects.values_list("number", flat=True))[:1] == [5]
    assert pruned_sentence(api.get(f"{DM}/memories?atBlock=4"))
    assert api.get(f"{DM}/memories?atBlock=5").status_code == 200

    aged(40)
    prune()

    assert list(Block.objects.values_list("number", flat=True)) == [11, 12]
    assert Agent.objects.get().history_pruned_through == 10


# --- memory changes ------------------------------------------------------------------------------


def test_memory_changes_past_keeping_go_and_the_store_as_of_each_later_block_is_as_before(
    api, story, studio_conf, monkeypatch
):
    studio_conf(RETAIN_MEMORY_CHANGES_DAYS=30)
    monkeypatch.setattr(retention, "STEP_CHANGES", 3)  # the kept store moves on in several steps
    aged(40)
    before = answers(api)

    prune()

    assert StoreBaseline.objects.get().through_block == 10
    assert set(MemoryEvent.objects.values_list("block", flat=True)) == {11, 12}
    assert Block.objects.count() == 12  # the blocks are kept: only the changes went
    after = answers(api)
    for path in (f"{DM}/memories?atBlock=11", f"{DM}/memories?atBlock=12", f"{DM}/checkpoints/3"):
        assert after[path] == before[path], path
    for number in range(1, 11):
        assert "memory changes of its blocks through 10 were pruned on" in pruned_sentence(
            api.get(f"{DM}/memories?atBlock={number}")
        )
    # Checkpoint 2's rewrites were among them; a memory whose every change went has no history kept.
    assert "rewrites for checkpoint 2" in pruned_sentence(api.get(f"{DM}/checkpoints/2"))
    assert "keeps no change of a memory named 'quest'" in pruned_sentence(
        api.get(f"{DM}/memories/quest/history")
    )
    bells = api.get(f"{DM}/memories/bells/history").json()["events"]
    assert [(e["change"], e["block"]) for e in bells] == [("opened", 11), ("updated", 12), ("closed", 12)]


def test_the_store_kept_in_place_of_changes_moves_on_with_the_next_prune(api, story, studio_conf):
    studio_conf(RETAIN_MEMORY_CHANGES_DAYS=30)
    Block.objects.filter(number__lte=5).update(created_at=timezone.now() - timedelta(days=40))
    prune()
    assert StoreBaseline.objects.get().through_block == 5
    aged(40)
    before = answers(api)

    prune()

    assert StoreBaseline.objects.get().through_block == 10
    after = answers(api)
    for number in (11, 12):
        assert after[f"{DM}/memories?atBlock={number}"] == before[f"{DM}/memories?atBlock={number}"]


def test_the_memories_page_says_from_when_changes_are_kept(story, designer, studio_conf):
    studio_conf(RETAIN_MEMORY_CHANGES_DAYS=30)
    aged(40)
    prune()

    page = designer.get(f"{PAGE}memories/").content.decode()

    assert "data-pruned" in page
    assert "through block 10" in page


# --- replays' copies, config revisions --------------------------------------------------------


def test_prune_removes_the_copy_an_ended_replay_left_and_the_replay_shows_what_it_did(
    api, story, monkeypatch
):
    # As a replay ended before its copy was removed with it (by an older
    # studio, or while its copy's model calls were still to be charged).
    monkeypatch.setattr("agents.replays.replay_copy_remove", lambda replay_id: False)
    started = api.post(f"{DM}/replays", {"fromBlock": 11, "definition": {"memory": None}}, format="json")
    monkeypatch.undo()
    replay = f"{DM}/replays/{started.json()['replay']['id']}"
    before, blocks = api.get(replay).json(), Block.objects.filter(agent=story).count()
    assert before["replay"]["status"] == "completed" and Agent.objects.count() == 2

    printed = prune(dry_run=True)
    assert re.search(r"^  replay copies +1 rows", printed, re.M)
    prune()

    assert list(Agent.objects.values_list("name", flat=True)) == ["dm"]
    assert Block.objects.count() == blocks
    assert api.get(replay).json() == before
    assert re.search(r"^  replay copies +0 rows", prune(dry_run=True), re.M)


def test_prune_deletes_replays_ended_longer_ago_than_their_days_with_what_they_kept(api, story, studio_conf):
    old = api.post(f"{DM}/replays", {"fromBlock": 12}, format="json").json()["replay"]
    Replay.objects.filter(uuid=old["id"]).update(ended_at=timezone.now() - timedelta(days=31))
    recent = api.post(f"{DM}/replays", {"fromBlock": 11}, format="json").json()["replay"]
    assert Replay.objects.get(uuid=old["id"]).kept is not None  # its rows, store and cost
    assert "kept for good" in re.search(r"^  ended replays.*$", prune(dry_run=True), re.M)[0]
    studio_conf(RETAIN_REPLAYS_DAYS=30)

    printed = prune(dry_run=True)
    prune()

    assert re.search(r"^  ended replays +1 rows .*\(STUDIO_RETAIN_REPLAYS_DAYS=30\)$", printed, re.M)
    assert list(Replay.objects.values_list("uuid", flat=True)) == [UUID(recent["id"])]
    assert api.get(f"{DM}/replays/{old['id']}").status_code == 404
    assert api.get(f"{DM}/replays/{recent['id']}").status_code == 200
    assert list(Agent.objects.values_list("name", flat=True)) == ["dm"]


def redefined(api, prompt: str) -> None:
    response = api.put(DM, {"systemPrompt": prompt, "memory": {}}, format="json")
    assert response.status_code == 200, response.content


def test_prune_keeps_an_agents_last_revisions_and_every_one_a_block_was_played_with(
    api, admin_api, agent, send, studio_conf
):
    studio_conf(KEEP_REVISIONS=0)  # as revisions made before the setting was lowered
    for number in range(2, 11):
        redefined(api, f"Prompt {number}.")
        if number in (4, 6):
            send(f"Played with revision {number}.")
    assert agent.revisions.count() == 10
    studio_conf(KEEP_REVISIONS=3)

    printed = prune(dry_run=True)
    prune()

    assert re.search(r"^  config revisions +5 rows .*\(STUDIO_KEEP_REVISIONS=3\)$", printed, re.M)
    assert list(agent.revisions.values_list("number", flat=True)) == [4, 6, 8, 9, 10]
    assert [api.get(f"{DM}/context?atBlock={n}").json()["system"] for n in (1, 2)] == [
        "Prompt 4.",
        "Prompt 6.",
    ]
    assert api.get(DM).json()["systemPrompt"] == "Prompt 10."
    exported = read_export(api.get(f"{DM}/export"))
    assert [r["revision"] for r in exported["configHistory"]] == [4, 6, 8, 9, 10]
    imported = admin_api.post("/api/v1/agents/import", {**exported, "name": "dm-b"}, format="json")
    assert imported.status_code == 201, imported.content


def test_a_definition_deletes_the_revisions_past_keeping_at_once_but_those_blocks_were_played_with(
    api, agent, send, studio_conf
):
    studio_conf(KEEP_REVISIONS=3)
    counts = []
    for number in range(2, 21):
        redefined(api, f"Prompt {number}. " + "A long prompt. " * 2000)
        if number in (4, 6):
            send(f"Played with revision {number}.")
        counts.append(agent.revisions.count())

    # Never more than the newest 3 and the 2 played with, without a prune.
    assert max(counts) <= 3 + 2
    assert list(agent.revisions.values_list("number", flat=True)) == [4, 6, 18, 19, 20]
    assert [api.get(f"{DM}/context?atBlock={n}").json()["system"][:10] for n in (1, 2)] == [
        "Prompt 4. ",
        "Prompt 6. ",
    ]
    assert re.search(r"^  config revisions +0 rows", prune(dry_run=True), re.M)


def test_an_import_keeps_no_more_revisions_than_a_definition_would(api, admin_api, agent, studio_conf):
    studio_conf(KEEP_REVISIONS=0)
    for number in range(2, 11):
        redefined(api, f"Prompt {number}.")
    exported = read_export(api.get(f"{DM}/export"))
    assert len(exported["configHistory"]) == 10
    studio_conf(KEEP_REVISIONS=3)

    imported = admin_api.post("/api/v1/agents/import", {**exported, "name": "dm-b"}, format="json")

    assert imported.status_code == 201, imported.content
    copy = Agent.objects.get(name="dm-b")
    # The file's 10, and the import's own (the config it was made with): the newest 3 kept.
    assert list(copy.revisions.values_list("number", flat=True)) == [9, 10, 11]


def test_prune_keeps_the_revision_a_running_turn_was_given(api, agent, studio_conf):
    studio_conf(KEEP_REVISIONS=1)
    for number in (2, 3):
        redefined(api, f"Prompt {number}.")
    agent.revisions.update(created_at=timezone.now() - timedelta(hours=1))
    agent.refresh_from_db()  # as a send reads it: at revision 3
    thread, _ = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED, {"say": "Late."}))
    wait_for(lambda: Turn.objects.filter(agent=agent, status="running").exists())
    for number in (4, 5):
        redefined(api, f"Prompt {number}.")

    prune()
    running = Turn.objects.get(agent=agent, status="running")
    api.post(f"{DM}/turns/{running.uuid}/cancel")
    thread.join(10)

    assert list(agent.revisions.values_list("number", flat=True)) == [3, 4, 5]
    given = api.get(f"{DM}/context?atBlock=1")
    assert given.status_code == 200 and given.json()["system"] == "Prompt 3.", given.content


def test_no_revision_goes_with_keep_revisions_at_0(api, agent, studio_conf):
    studio_conf(KEEP_REVISIONS=0)
    for number in range(2, 6):
        redefined(api, f"Prompt {number}.")

    assert "kept for good" in re.search(r"^  config revisions.*$", prune(), re.M)[0]

    assert agent.revisions.count() == 5


# --- turns without a block, cost lines, the ledger --------------------------------------------


def test_ended_turns_without_a_block_go_after_their_days_and_played_ones_stay(agent, send, studio_conf):
    studio_conf(RETAIN_TURNS_DAYS=30)
    old, new = send("Who is there?", transient=True), send("And now?", transient=True)
    played = send("I open the door.")
    Turn.objects.exclude(uuid=new["id"]).update(created_at=timezone.now() - timedelta(days=40))

    prune()

    assert {str(turn) for turn in Turn.objects.values_list("uuid", flat=True)} == {new["id"], played["id"]}
    assert old["id"] not in [new["id"], played["id"]]


def test_cost_lines_of_pruned_turns_go_their_sum_carried_forward_and_the_ledger_balances(
    api, story, studio_conf, game
):
    studio_conf(RETAIN_HISTORY_DAYS=30, RETAIN_COST_LINES_DAYS=30)
    aged(40)
    balance = Account.objects.get(game=game).balance
    compactions = sum(CostLine.objects.filter(turn_id=None).values_list("amount", flat=True), Decimal(0))
    kept_turn = Block.objects.get(number=12).turn.uuid
    kept_cost = api.get(f"{DM}/turns/{kept_turn}").json()["turn"]["cost"]
    prune()  # the compaction's line goes; the turns go, their lines past keeping from the next run
    gone = CostLine.objects.exclude(turn_id__in=Turn.objects.values("uuid"))
    spent = sum(gone.values_list("amount", flat=True), Decimal(0))
    assert compactions > 0 and spent > 0
    assert Account.objects.get(game=game).pruned_spend == compactions

    prune()

    account = Account.objects.get(game=game)
    assert not gone.exists()
    assert account.balance == balance
    assert account.pruned_spend == spent + compactions
    assert api.get(f"{DM}/turns/{kept_turn}").json()["turn"]["cost"] == kept_cost
    assert CostLine.objects.filter(turn_id=kept_turn).exists()
    out = io.StringIO()
    call_command("checkledger", stdout=out)
    assert out.getvalue().startswith("ok ")


# --- a dry run -----------------------------------------------------------------------------------


def test_a_dry_run_deletes_nothing_and_prints_each_kinds_rows_and_size(api, story, studio_conf):
    studio_conf(RETAIN_HISTORY_DAYS=30, RETAIN_MEMORY_CHANGES_DAYS=30, RETAIN_COST_LINES_DAYS=30)
    aged(40)
    Session.objects.create(session_key="gone" * 8, session_data="", expire_date=timezone.now())
    before, kept = answers(api), counts()

    printed = prune(dry_run=True)

    assert counts() == kept
    assert answers(api) == before
    size = r"about [\d.,]+ (?:bytes|KB|MB)" if connection.vendor == "postgresql" else "size not known"
    rows = dict(re.findall(rf"^  (\S[\w ]+?) +([\d,]+) rows +{size}", printed, re.M))
    assert rows == {
        "idempotency keys": "0",
        "expired sessions": "1",
        "replay copies": "0",
        "config revisions": "0",
        "cost lines": str(CostLine.objects.filter(turn_id=None).count()),
        "blocks": "10",
        "turns of pruned blocks": "10",
        "checkpoints emptied": "1",
        "memory changes": str(MemoryEvent.objects.filter(block__lte=10).count()),
        "refusal counts": "0",
        "alert deliveries": "0",
    }
    assert "turns without a block" in printed and "kept for good" in printed
    assert re.search(rf"^In all {size}\.$", printed, re.M)


def test_a_run_deletes_what_its_dry_run_said(story, studio_conf):
    studio_conf(RETAIN_HISTORY_DAYS=30, RETAIN_MEMORY_CHANGES_DAYS=30, RETAIN_COST_LINES_DAYS=30)
    aged(40)
    said = {found.kind: found.rows for found in retention.prune(dry_run=True)}

    done = {found.kind: found.rows for found in retention.prune()}

    assert done == said
    assert done["blocks"] == 10


# --- two at once ---------------------------------------------------------------------------------


def test_two_prunes_at_once_delete_each_row_once_and_leave_what_one_would(
    api, story, studio_conf, monkeypatch
):
    studio_conf(RETAIN_HISTORY_DAYS=30, RETAIN_MEMORY_CHANGES_DAYS=30, RETAIN_COST_LINES_DAYS=30)
    monkeypatch.setattr(retention, "BATCH", 1)
    monkeypatch.setattr(retention, "STEP_CHANGES", 1)
    aged(40)
    before = answers(api)
    said = {found.kind: found.rows for found in retention.prune(dry_run=True)}
    start, results = threading.Barrier(2), []

    def one_prune():
        try:
            start.wait(10)
            results.append({found.kind: found.rows for found in retention.prune()})
        except BaseException as error:
            results.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=one_prune) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert all(isinstance(result, dict) for result in results), results
    for kind in ("blocks", "turns of pruned blocks", "checkpoints emptied", "memory changes", "cost lines"):
        assert results[0][kind] + results[1][kind] == said[kind], kind
    assert list(Block.objects.values_list("number", flat=True)) == [11, 12]
    assert StoreBaseline.objects.get().through_block == 10
    after = answers(api)
    for path in (f"{DM}/memories?atBlock=12", f"{DM}/context?atBlock=12", f"{DM}/checkpoints/3"):
        assert after[path] == before[path], path
    out = io.StringIO()
    call_command("checkledger", stdout=out)
    assert out.getvalue().startswith("ok ")


def test_a_prune_beside_sends_leaves_them_whole_and_the_ledger_balanced(api, story, studio_conf, monkeypatch):
    studio_conf(RETAIN_HISTORY_DAYS=30, RETAIN_MEMORY_CHANGES_DAYS=30, RETAIN_COST_LINES_DAYS=30)
    monkeypatch.setattr(retention, "BATCH", 1)
    aged(40)

    thread, box = in_thread(retention.prune)
    sends = [
        api.post(f"{DM}/messages", {"content": script(call("open_memory", name="npcs"))}, format="json")
        for _ in range(4)
    ]
    thread.join(60)

    assert "error" not in box, box
    assert [(r.status_code, r.json()["turn"]["status"]) for r in sends] == [(200, "completed")] * 4
    assert list(Block.objects.values_list("number", flat=True)) == [11, 12, 13, 14, 15, 16]
    store = {m["name"]: (m["open"], m["content"]) for m in api.get(f"{DM}/memories").json()["memories"]}
    then = api.get(f"{DM}/memories?atBlock=16").json()["memories"]
    assert {m["name"]: (m["open"], m["content"]) for m in then} == store
    out = io.StringIO()
    call_command("checkledger", stdout=out)
    assert out.getvalue().startswith("ok ")


def test_a_send_after_a_prune_plays_on_from_the_checkpoint_in_force(api, story, studio_conf):
    studio_conf(RETAIN_HISTORY_DAYS=30, RETAIN_MEMORY_CHANGES_DAYS=30)
    aged(40)
    prune()
    context = api.get(f"{DM}/context").json()

    turn = turn_send(agent=story, content=script(call("open_memory", name="npcs"), {"say": "On we go."}))

    assert turn.status == "completed"
    assert api.get(f"{DM}/context?atBlock=13").json()["messages"][:-1] == context["messages"]
    assert api.get(f"{DM}/memories?atBlock=13").status_code == 200


def test_a_kept_store_moves_past_blocks_without_changes_in_one_write(define, studio_conf):
    """Each move of the kept store writes it whole (up to the store cap):
    a thousand blocks with no memory change in them cost one write, not one
    per so many blocks."""
    from django.test.utils import CaptureQueriesContext

    from agents.models import CheckpointKind, TurnStatus

    studio_conf(RETAIN_MEMORY_CHANGES_DAYS=1)
    agent = define("dm")
    old = timezone.now() - timedelta(days=10)
    after = {"description": "d", "content": "lore " * 2_000, "open": False, "version": 1}
    MemoryEvent.objects.create(
        agent=agent,
        name="lore",
        change="created",
        by="agent",
        block=1,
        before=None,
        after=after,
        created_at=old,
    )
    entries = [{"type": "message", "role": "user", "content": "hi"}]
    Block.objects.bulk_create(
        Block(agent=agent, number=n, status=TurnStatus.COMPLETED, folded=True, entries=entries)
        for n in range(1, 1_001)
    )
    Block.objects.filter(agent=agent).update(created_at=old)
    Agent.objects.filter(pk=agent.pk).update(last_block=1_000)
    Checkpoint.objects.create(
        agent=agent, kind=CheckpointKind.FORCED, through_block=1_000, context_block="x", from_block=1_001
    )

    with CaptureQueriesContext(connection) as statements:
        retention.prune()

    kept = StoreBaseline.objects.get(agent=agent)
    writes = [q["sql"] for q in statements.captured_queries if "memories_storebaseline" in q["sql"]]
    writes = [sql for sql in writes if sql.startswith(("INSERT", "UPDATE"))]
    assert [memory["name"] for memory in kept.memories] == ["lore"]
    assert kept.through_block >= 900
    assert len(writes) == 1, writes
    assert not MemoryEvent.objects.filter(agent=agent).exists()
