"""Compaction, run inline: what it folds, the checkpoint it writes, the
memories it may rewrite, the forced 200-block checkpoint, and failure."""

import pytest
from django.db import transaction

from agents import compaction as compaction_module
from agents.compaction import compaction_request, compaction_run
from agents.models import (
    Block,
    Checkpoint,
    CheckpointKind,
    Compaction,
    CompactionReason,
    CompactionStatus,
    Turn,
    TurnStatus,
)
from agents.providers.scripted import ScriptedProvider, sleep_max_seconds
from agents.sending.turn_slot import turn_cancel
from billing.models import CostLine
from memories.models import Change, Memory, MemoryEvent, Writer
from memories.tools import tool_run
from tests.support.sending import turn_send

from ..conftest import UNTIL_CANCELLED, call, compaction_attempt_failing, in_thread, script, wait_for

# Transactional: compactions are queued with on_commit, so commits must be real.
pytestmark = pytest.mark.django_db(transaction=True)

QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the key."}


def no_model_call(self, request):
    raise AssertionError("this compaction must not call the model")


@pytest.fixture
def model_inputs(monkeypatch) -> list[int]:
    """The input tokens of every turn's model call from here on."""
    seen = []
    original = ScriptedProvider.complete

    def record(self, request, control):
        seen.append(request.input_tokens)
        return original(self, request, control)

    monkeypatch.setattr(ScriptedProvider, "complete", record)
    return seen


def compact_now(agent):
    return (
        Compaction.objects.filter(agent=agent).order_by("-id").first()
        if compaction_request(agent=agent, reason=CompactionReason.MANUAL)
        else None
    )


def test_a_manual_compaction_folds_every_verbatim_block_but_the_newest(agent):
    for n in range(1, 5):
        turn_send(agent=agent, content=f"message {n}")

    done = compact_now(agent)

    assert done.status == CompactionStatus.DONE
    checkpoint = Checkpoint.objects.get(agent=agent)
    assert (checkpoint.kind, checkpoint.through_block) == (CheckpointKind.COMPACTION, 3)
    assert list(Block.objects.filter(agent=agent, folded=True).values_list("number", flat=True)) == [1, 2, 3]
    assert not Block.objects.get(number=4).folded


def test_the_context_block_after_compaction_has_the_exact_text(agent, api):
    turn_send(
        agent=agent,
        content=script(call("close_memory", **QUEST), call("open_memory", name="quest"), {"say": "Noted."}),
    )
    turn_send(
        agent=agent,
        content=script(
            call("close_memory", name="npcs", description="Who Mara met", content="The ferryman."),
            {"say": "ok"},
        ),
    )
    turn_send(agent=agent, content="The bells ring.")

    compact_now(agent)

    body = api.get("/api/v1/agents/dm/context").json()
    summary = Checkpoint.objects.get(agent=agent).summary
    assert body["contextBlock"] == (
        "[Context — written by the platform, not said by anyone. Play continues from the messages after this one.]\n\n"
        "## Summary of earlier conversation\n\n"
        f"{summary}\n\n"
        "## Open memories — current as of this point\n\n"
        "### quest — What the player wants now\n"
        "Find the key.\n\n"
        "## Closed memories — call open_memory to read one\n\n"
        "- npcs — Who Mara met\n\n"
        "[End of context]"
    )
    assert summary.startswith("- user: ")
    assert "- assistant: Noted." in summary
    assert [m["content"] for m in body["messages"] if m["role"] == "user"] == ["The bells ring."]
    assert body["tokens"]["contextBlock"] > 0


def test_folded_blocks_stay_in_history_marked_folded(agent, api):
    for n in range(3):
        turn_send(agent=agent, content=f"m{n}")

    compact_now(agent)

    blocks = api.get("/api/v1/agents/dm/history").json()["blocks"]
    assert [(b["block"], b["folded"]) for b in blocks] == [(1, True), (2, True), (3, False)]
    assert blocks[0]["entries"][0]["content"] == "m0"


def test_the_compactor_rewrites_open_memories_from_memory_lines(agent):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), call("open_memory", name="quest")))
    turn_send(agent=agent, content="@memory quest: Open the house in Ashmere.")
    turn_send(agent=agent, content="newest")

    compact_now(agent)

    memory = Memory.objects.get(name="quest")
    assert (memory.content, memory.updated_by) == ("Open the house in Ashmere.", Writer.COMPACTOR)
    event = MemoryEvent.objects.filter(name="quest").last()
    assert (event.change, event.by, event.before["content"]) == (
        Change.UPDATED,
        Writer.COMPACTOR,
        "Find the key.",
    )
    assert (
        "### quest — What the player wants now\nOpen the house in Ashmere."
        in Checkpoint.objects.get().context_block
    )


def test_the_compactor_never_writes_a_closed_memory(agent):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST)))  # stays closed
    turn_send(agent=agent, content="@memory quest: overwritten?")
    turn_send(agent=agent, content="newest")

    compact_now(agent)

    assert Memory.objects.get(name="quest").content == "Find the key."


def test_a_rewrite_of_a_memory_changed_since_the_compactor_read_it_is_dropped(agent, monkeypatch):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), call("open_memory", name="quest")))
    turn_send(agent=agent, content="@memory quest: the compactor's version")
    turn_send(agent=agent, content="newest")
    original = ScriptedProvider.summarize

    def agent_writes_meanwhile(self, request):
        with transaction.atomic():  # the agent closes it with new content while the compactor thinks
            tool_run(
                agent=agent,
                name="close_memory",
                arguments={"name": "quest", "content": "the agent's version"},
            )
            tool_run(agent=agent, name="open_memory", arguments={"name": "quest"})
        return original(self, request)

    monkeypatch.setattr(ScriptedProvider, "summarize", agent_writes_meanwhile)

    compact_now(agent)

    assert Memory.objects.get(name="quest").content == "the agent's version"
    dropped = MemoryEvent.objects.get(name="quest", change=Change.DROPPED)
    assert dropped.by == Writer.COMPACTOR
    assert "written after the compactor read it" in dropped.note
    assert dropped.after == {"content": "the compactor's version"}


MEANWHILE = {
    # What the agent does to `quest` while the compactor works on it.
    "deleted": [("delete_memory", {"name": "quest"})],
    "closed": [("close_memory", {"name": "quest"})],
    "written": [
        ("close_memory", {"name": "quest", "content": "the agent's version"}),
        ("open_memory", {"name": "quest"}),
    ],
    "deleted and made again": [
        ("delete_memory", {"name": "quest"}),
        ("close_memory", {**QUEST, "content": "the agent's version"}),
        ("open_memory", {"name": "quest"}),
    ],
}


@pytest.mark.parametrize("what", list(MEANWHILE))
def test_the_compactor_rewrites_only_the_memory_it_was_shown_as_it_was_shown(agent, monkeypatch, what):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), call("open_memory", name="quest")))
    turn_send(agent=agent, content="@memory quest: the compactor's version")
    turn_send(agent=agent, content="newest")
    original = ScriptedProvider.summarize

    def agent_acts_meanwhile(self, request):
        with transaction.atomic():
            for name, arguments in MEANWHILE[what]:
                assert not tool_run(agent=agent, name=name, arguments=arguments).is_error
        return original(self, request)

    monkeypatch.setattr(ScriptedProvider, "summarize", agent_acts_meanwhile)

    compact_now(agent)

    quest = Memory.objects.filter(name="quest").first()
    assert quest is None or quest.content != "the compactor's version"
    assert not MemoryEvent.objects.filter(name="quest", by=Writer.COMPACTOR, change=Change.UPDATED).exists()
    if quest is not None:  # a dropped rewrite is kept in the history of the memory it would have hit
        dropped = MemoryEvent.objects.get(name="quest", change=Change.DROPPED)
        assert f"was {what} after the compactor read it" in dropped.note


def test_a_rewrite_past_max_open_tokens_is_kept_a_guideline_not_a_limit(define):
    agent = define("dm", max_open_tokens=16, max_tokens=1000)
    longer = "far more words than the budget of eight tokens allows"  # 10 tokens, beside npcs' 7
    npcs = {"name": "npcs", "description": "Who Mara met", "content": "The ferryman is wary of her."}
    turn_send(
        agent=agent,
        content=script(
            call("close_memory", **QUEST),
            call("open_memory", name="quest"),
            call("close_memory", **npcs),
            call("open_memory", name="npcs"),
        ),
    )
    turn_send(agent=agent, content=f"@memory quest: {longer}")
    turn_send(agent=agent, content="newest")

    compact_now(agent)

    assert Memory.objects.get(name="quest").content == longer
    assert not MemoryEvent.objects.filter(change=Change.DROPPED).exists()
    assert (
        f"### quest — What the player wants now\n{longer}"
        in Checkpoint.objects.order_by("-id")[0].context_block
    )


def test_a_compaction_is_billed_as_one_compaction_line_with_no_memory_access_fee(agent, game):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), call("open_memory", name="quest")))
    turn_send(agent=agent, content="newest")
    memory_lines_before = CostLine.objects.filter(kind="memory_access").count()

    done = compact_now(agent)

    line = CostLine.objects.get(kind="compaction")
    assert line.compaction_id == done.uuid
    assert line.turn_id is None
    assert line.quantity > 0 and line.amount > 0
    assert CostLine.objects.filter(kind="memory_access").count() == memory_lines_before


def test_sliding_window_folds_with_no_model_call_and_no_summary(define, monkeypatch):
    agent = define("dm", compaction_type="sliding-window")
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), call("open_memory", name="quest")))
    turn_send(agent=agent, content="newest")

    monkeypatch.setattr(ScriptedProvider, "summarize", no_model_call)

    compact_now(agent)

    checkpoint = Checkpoint.objects.get(agent=agent)
    assert checkpoint.summary is None
    assert "## Summary" not in checkpoint.context_block
    assert "### quest — What the player wants now\nFind the key." in checkpoint.context_block
    assert not CostLine.objects.filter(kind="compaction").exists()


def test_between_compactions_the_block_does_not_change(agent, api):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), call("open_memory", name="quest")))
    turn_send(agent=agent, content="newest")
    compact_now(agent)
    before = api.get("/api/v1/agents/dm/context").json()["contextBlock"]

    turn_send(
        agent=agent,
        content=script(
            call("close_memory", name="quest", content="Changed."),
            call("close_memory", name="new", description="d", content="c"),
        ),
    )

    assert api.get("/api/v1/agents/dm/context").json()["contextBlock"] == before
    compact_now(agent)
    after = api.get("/api/v1/agents/dm/context").json()["contextBlock"]
    assert "- quest — What the player wants now" in after  # closed now: listed by description
    assert "- new — d" in after


# --- when it runs ----------------------------------------------------------------------


def test_a_compaction_is_queued_when_the_context_passes_the_soft_threshold(define, studio_conf):
    studio_conf(COMPACTION_SOFT_RATIO=0.75, COMPACTION_KEEP_RATIO=0.3)
    agent = define("dm", memory_enabled=False, max_tokens=1000)
    words = "lorem ipsum dolor sit amet " * 20  # ~100 tokens a block

    for n in range(8):
        turn_send(agent=agent, content=f"{n} {words}")

    assert Compaction.objects.filter(
        agent=agent, reason=CompactionReason.THRESHOLD, status=CompactionStatus.DONE
    ).exists()
    body_tokens = sum(Block.objects.filter(agent=agent, folded=False).values_list("tokens", flat=True))
    assert body_tokens <= 0.75 * 1000
    assert Block.objects.filter(agent=agent).count() == 8


def test_a_context_block_near_the_soft_threshold_does_not_make_every_turn_compact(define, studio_conf):
    # Open memories near maxOpenTokens: a checkpoint with them plus the
    # newest 30% of maxTokens kept verbatim is already past the threshold,
    # so each turn's end used to fold its one block and write a checkpoint.
    studio_conf(COMPACTION_SOFT_RATIO=0.75, COMPACTION_KEEP_RATIO=0.3)
    agent = define("dm", compaction_type="sliding-window", max_tokens=4000, max_open_tokens=1990)
    lore = "The drowned chapel keeps its bells. " * 262  # ~1,880 tokens
    for tool, arguments in (("close_memory", {"description": "d", "content": lore}), ("open_memory", {})):
        with transaction.atomic():
            assert not tool_run(agent=agent, name=tool, arguments={"name": "lore", **arguments}).is_error
    turn_send(agent=agent, content="first")
    turn_send(agent=agent, content="second")
    first = compact_now(agent).checkpoint
    assert first.block_tokens > 0.45 * agent.max_tokens

    for n in range(16):
        turn_send(agent=agent, content=f"{n} " + "ask " * 60)

    compactions = Compaction.objects.filter(agent=agent, reason=CompactionReason.THRESHOLD)
    assert 0 < compactions.count() <= 4
    assert not Turn.objects.filter(agent=agent).exclude(status=TurnStatus.COMPLETED).exists()


def test_a_send_that_would_pass_max_tokens_waits_for_a_compaction_and_then_fits(
    define, studio_conf, model_inputs
):
    studio_conf(COMPACTION_SOFT_RATIO=10.0)  # never queued after a turn: only the overflow check
    agent = define("dm", memory_enabled=False, max_tokens=600)
    words = "lorem ipsum dolor sit amet " * 20
    for n in range(4):
        turn_send(agent=agent, content=f"{n} {words}")
    model_inputs.clear()

    turn = turn_send(agent=agent, content=f"overflow {words}")

    assert turn.status == TurnStatus.COMPLETED
    assert Compaction.objects.filter(agent=agent, status=CompactionStatus.DONE).count() == 1
    assert model_inputs and max(model_inputs) <= 600


def test_a_send_fails_clearly_when_the_compaction_does_not_finish_in_time(define, studio_conf):
    studio_conf(COMPACTION_SOFT_RATIO=10.0, COMPACTION_WAIT_SECONDS=0, COMPACTION_RUNNER="none")
    agent = define("dm", memory_enabled=False, max_tokens=600)
    words = "lorem ipsum dolor sit amet " * 20
    for n in range(4):
        turn_send(agent=agent, content=f"{n} {words}")
    Compaction.objects.create(agent=agent, reason=CompactionReason.THRESHOLD)  # live, never run

    turn = turn_send(agent=agent, content=f"overflow {words}")

    assert turn.status == TurnStatus.FAILED
    assert "over maxTokens 600" in turn.error


def test_only_one_compaction_is_live_per_agent(agent):
    first = Compaction.objects.create(agent=agent, reason=CompactionReason.THRESHOLD)

    again = compaction_request(agent=agent, reason=CompactionReason.MANUAL)

    assert again.pk == first.pk
    assert Compaction.objects.filter(agent=agent).count() == 1


# --- the forced checkpoint ---------------------------------------------------------------


@pytest.mark.slow  # heavy by design: left out of `make test-fast` (#38)
def test_a_forced_checkpoint_is_written_when_the_oldest_block_has_aged_200_blocks(define):
    agent = define("dm", memory_enabled=False, max_tokens=10_000_000)

    for n in range(1, 201):
        turn_send(agent=agent, content=f"m{n}")
    assert not Checkpoint.objects.filter(agent=agent).exists()
    turn_send(agent=agent, content="m201")

    checkpoint = Checkpoint.objects.get(agent=agent)
    assert (checkpoint.kind, checkpoint.through_block) == (CheckpointKind.FORCED, 200)
    assert Block.objects.filter(agent=agent, folded=False).count() == 1
    assert Block.objects.filter(agent=agent).count() == 201
    assert checkpoint.summary.endswith('- user: m200\n- assistant: You said: "m200"')


def test_a_cancelled_turn_ages_history_without_running_the_check(define, studio_conf):
    studio_conf(FORCED_CHECKPOINT_BLOCKS=5)
    agent = define("dm", memory_enabled=False, max_tokens=10_000_000)
    for n in range(1, 6):
        turn_send(agent=agent, content=f"m{n}")
    thread, box = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
    wait_for(lambda: Turn.objects.filter(agent=agent, status=TurnStatus.RUNNING).exists())

    turn_cancel(Turn.objects.get(agent=agent, status=TurnStatus.RUNNING))
    thread.join(10)

    assert (box["result"].status, box["result"].block_number) == (TurnStatus.CANCELLED, 6)
    assert not Checkpoint.objects.filter(agent=agent).exists()  # 6 - 1 >= 5, but cancelled
    turn_send(agent=agent, content="m7")
    checkpoint = Checkpoint.objects.get(agent=agent)
    assert (checkpoint.kind, checkpoint.through_block) == (CheckpointKind.FORCED, 6)


def test_a_forced_checkpoint_with_nothing_new_carries_the_summary_forward_without_a_model_call(
    agent, monkeypatch
):
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    compact_now(agent)
    first = Checkpoint.objects.get(agent=agent)

    monkeypatch.setattr(ScriptedProvider, "summarize", no_model_call)
    compaction_request(agent=agent, reason=CompactionReason.FORCED)

    second = Checkpoint.objects.filter(agent=agent).latest()
    assert second.pk != first.pk
    assert (second.kind, second.summary, second.through_block) == (
        CheckpointKind.FORCED,
        first.summary,
        first.through_block,
    )


def test_a_forced_checkpoint_on_sliding_window_shows_a_memory_written_in_a_block_it_folds(
    define, monkeypatch
):
    agent = define("dm", compaction_type="sliding-window")
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), call("open_memory", name="quest")))
    turn_send(
        agent=agent,
        content=script(
            call("close_memory", name="quest", content="Open the house in Ashmere."),
            call("open_memory", name="quest"),
        ),
    )
    turn_send(agent=agent, content="newest")
    monkeypatch.setattr(ScriptedProvider, "summarize", no_model_call)

    compaction_request(agent=agent, reason=CompactionReason.FORCED)

    checkpoint = Checkpoint.objects.get(agent=agent)
    assert (checkpoint.kind, checkpoint.through_block, checkpoint.summary) == (CheckpointKind.FORCED, 2, None)
    assert "### quest — What the player wants now\nOpen the house in Ashmere." in checkpoint.context_block


def test_a_forced_checkpoint_with_nothing_new_shows_the_store_as_it_stands(agent, monkeypatch):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), call("open_memory", name="quest")))
    turn_send(agent=agent, content="newest")
    first = compact_now(agent).checkpoint
    with transaction.atomic():  # the agent rewrites it in the current block, after that checkpoint
        tool_run(agent=agent, name="close_memory", arguments={"name": "quest", "content": "Open the house."})
        tool_run(agent=agent, name="open_memory", arguments={"name": "quest"})
    monkeypatch.setattr(ScriptedProvider, "summarize", no_model_call)

    compaction_request(agent=agent, reason=CompactionReason.FORCED)

    second = Checkpoint.objects.filter(agent=agent).latest()
    assert (second.kind, second.through_block, second.summary) == (
        CheckpointKind.FORCED,
        first.through_block,
        first.summary,
    )
    assert "### quest — What the player wants now\nOpen the house." in second.context_block
    assert "### quest — What the player wants now\nFind the key." in first.context_block


# --- failure ---------------------------------------------------------------------------------


def test_a_failing_compaction_leaves_the_previous_checkpoint_and_is_retried(agent, studio_conf):
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    compact_now(agent)
    first = Checkpoint.objects.get(agent=agent)
    turn_send(agent=agent, content="@compactor-fail provider down")
    turn_send(agent=agent, content="m4")
    studio_conf(COMPACTION_RUNNER="none")

    pending = compaction_attempt_failing(agent)

    assert (pending.status, pending.attempts) == (CompactionStatus.QUEUED, 1)
    assert "provider down" in pending.error
    assert Checkpoint.objects.filter(agent=agent).latest().pk == first.pk
    assert not Block.objects.get(number=3).folded
    assert turn_send(agent=agent, content="turns keep working").status == TurnStatus.COMPLETED


@pytest.mark.parametrize(
    "content, says",
    [
        # a model call that keeps failing
        ("@compactor-fail always", "always"),
        # a compactor sleep that is not a number
        (
            "@compactor-sleep abc",
            '@compactor-sleep needs a number of seconds from 0 up (it waits {cap} s at most), not "abc"',
        ),
    ],
)
def test_a_compaction_that_keeps_failing_ends_failed_after_its_attempts_saying_why(
    agent, studio_conf, content, says
):
    studio_conf(COMPACTION_MAX_ATTEMPTS=2, SCRIPTED_SLEEP_MAX_SECONDS=10.0)
    turn_send(agent=agent, content=content)
    turn_send(agent=agent, content="m2")

    done = compact_now(agent)

    assert (done.status, done.attempts) == (CompactionStatus.FAILED, 2)
    says = says.replace("{cap}", f"{sleep_max_seconds():g}")  # the tests' environment raises it
    assert done.error == f"The compaction's model call failed: {says}"
    assert not Checkpoint.objects.exists()
    assert turn_send(agent=agent, content="turns keep working").status == TurnStatus.COMPLETED


def test_a_scripted_agents_compaction_fails_saying_why_once_the_setting_is_off(agent, studio_conf):
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    studio_conf(ALLOW_SCRIPTED_MODEL=False, COMPACTION_MAX_ATTEMPTS=1)

    done = compact_now(agent)

    assert done.status == CompactionStatus.FAILED
    assert "STUDIO_ALLOW_SCRIPTED_MODEL is off" in done.error
    assert done.error.startswith("The compaction's model call failed: this agent uses the test model")
    assert not Checkpoint.objects.exists()


def test_running_a_finished_compaction_again_changes_nothing(agent):
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    done = compact_now(agent)

    assert compaction_run(str(done.uuid)) is None
    assert Checkpoint.objects.count() == 1
    assert CostLine.objects.filter(kind="compaction").count() == 1


def test_a_second_run_of_the_same_compaction_stands_down(agent):
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    pending = Compaction.objects.create(agent=agent, reason=CompactionReason.MANUAL)
    plan_before = compaction_module._plan(agent, pending)
    compaction_run(str(pending.uuid))  # the first run installs

    # A duplicate delivery that had read the same plan must not fold twice.
    compaction_module._install(agent, pending, plan_before, None)

    assert Checkpoint.objects.count() == 1


# --- API ------------------------------------------------------------------------------------


def test_post_compact_queues_one_now(api, agent):
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")

    response = api.post("/api/v1/agents/dm/compact")

    assert response.status_code == 202
    assert response.json()["compaction"]["reason"] == "manual"
    listed = api.get("/api/v1/agents/dm/compactions").json()["compactions"]
    assert listed[0]["status"] == "done" and listed[0]["throughBlock"] == 1
    assert api.get("/api/v1/agents/dm/checkpoint").json()["throughBlock"] == 1


def test_post_compact_for_another_games_agent_is_404(outsider, agent):
    assert outsider.post("/api/v1/agents/dm/compact").status_code == 404


def test_a_send_waits_for_a_slow_compaction_running_in_the_background(define, studio_conf, monkeypatch):
    studio_conf(COMPACTION_SOFT_RATIO=10.0, COMPACTION_RUNNER="thread")
    agent = define("dm", memory_enabled=False, max_tokens=600)
    words = "lorem ipsum dolor sit amet " * 20
    turn_send(agent=agent, content="@compactor-sleep 0.5")  # folded first: the compaction takes 0.5 s
    for n in range(4):
        turn_send(agent=agent, content=f"{n} {words}")

    turn = turn_send(agent=agent, content=f"overflow {words}")

    assert turn.status == TurnStatus.COMPLETED
    assert turn.compaction_wait_ms >= 400
    assert Turn.objects.get(pk=turn.pk).compaction_wait_ms == turn.compaction_wait_ms
    assert Compaction.objects.get(agent=agent).status == CompactionStatus.DONE


def test_a_queued_compaction_whose_task_was_lost_is_sent_again(agent):
    from datetime import timedelta

    from django.utils import timezone

    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    lost = Compaction.objects.create(
        agent=agent, reason=CompactionReason.MANUAL, lease_until=timezone.now() - timedelta(seconds=1)
    )

    compaction_request(agent=agent, reason=CompactionReason.THRESHOLD)

    lost.refresh_from_db()
    assert lost.status == CompactionStatus.DONE
    assert Checkpoint.objects.filter(agent=agent).exists()


def test_over_many_sends_the_model_is_never_given_more_than_max_tokens(define, model_inputs):
    agent = define("dm", memory_enabled=False, max_tokens=1000)
    for n in range(40):
        turn_send(agent=agent, content=f"{n} " + "the tide comes in over the drowned chapel " * 6)

    assert len(model_inputs) == 40
    assert max(model_inputs) <= 1000
    assert Block.objects.filter(agent=agent).count() == 40


def test_a_compaction_that_fails_inside_the_studio_tells_the_game_the_kind_not_the_details(
    agent, studio_conf, monkeypatch, caplog
):
    from django.db import OperationalError

    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    studio_conf(COMPACTION_RUNNER="none")

    def broken(*args):
        raise OperationalError('connection to server at "db.internal" (10.0.0.5) failed')

    monkeypatch.setattr(compaction_module, "_install", broken)

    pending = compaction_attempt_failing(agent)

    assert "OperationalError" in pending.error and str(pending.uuid) in pending.error
    assert "10.0.0.5" not in pending.error and "db.internal" not in pending.error
    assert "10.0.0.5" in caplog.text


def test_a_context_block_near_the_threshold_does_not_bring_a_compaction_every_turn(define):
    """Open memories near maxOpenTokens, a full summary and a long listing
    can make the context block alone pass the soft threshold: folding a
    turn's small block cannot bring the context under it, so the soft
    threshold waits for history worth folding rather than queueing a
    compaction (billed) and a checkpoint at every turn's end."""
    import random

    from agents.sending.context import fixed_tokens
    from studio.tokens import count_tokens

    agent = define("dm", max_tokens=8000, max_open_tokens=3999)
    pick = random.Random(38)
    words = ["bell", "tide", "stone", "chapel", "ferry", "salt", "lantern", "reed", "gull", "moss"]
    lore = []
    while count_tokens(" ".join(lore)) < 3_900:
        lore += [f"{pick.choice(words)}{pick.randint(0, 99)}" for _ in range(50)]
    while count_tokens(" ".join(lore)) > 3_950:
        lore.pop()
    with transaction.atomic():
        tool_run(
            agent=agent,
            name="close_memory",
            arguments={"name": "lore", "description": "d", "content": " ".join(lore)},
        )
        tool_run(agent=agent, name="open_memory", arguments={"name": "lore"})
        for n in range(40):
            description = f"Memory {n} " + "lore " * 18
            tool_run(
                agent=agent,
                name="close_memory",
                arguments={"name": f"m{n:03d}", "description": description, "content": "x"},
            )
    for n in range(30):  # history for the summary
        turn_send(agent=agent, content=f"{n} " + "the tide rolls over the old stones " * 5)
    compact_now(agent)
    block = Checkpoint.objects.filter(agent=agent).order_by("-id").first().block_tokens
    soft, keep = 0.75 * 8000, 0.3 * 8000
    assert block + fixed_tokens(agent) > soft - keep / 2  # the block leaves no room to fold into
    written = Checkpoint.objects.filter(agent=agent).count()

    turns = [turn_send(agent=agent, content=f"hi {n}") for n in range(16)]

    assert {turn.status for turn in turns} == {TurnStatus.COMPLETED}
    assert Checkpoint.objects.filter(agent=agent).count() - written <= 2
