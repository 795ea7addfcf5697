"""The spec's rules on the paths a first reading misses: a transient send
leaves no trace, compactions included; a forced checkpoint is never lost by
being absorbed into a compaction already live."""

import threading

import pytest

from agents.compaction import compaction_request, compaction_run
from agents.models import Block, Checkpoint, CheckpointKind, Compaction, CompactionReason, CompactionStatus
from agents.providers.scripted import ScriptedProvider
from tests.support.sending import turn_send

from ..conftest import error_of, in_thread, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# About 300 tokens: three of them pass 75% of a 1,000-token window.
LONG = "The bells of the drowned chapel ring under the water. " * 27


def test_a_transient_send_never_queues_a_compaction_even_past_the_threshold(api, define):
    define("dm", memory_enabled=False, max_tokens=1000, compaction_type="sliding-window")
    for _ in range(2):
        api.post("/api/v1/agents/dm/messages", {"content": LONG}, format="json")
    assert not Compaction.objects.exists()

    sent = api.post("/api/v1/agents/dm/messages", {"content": LONG, "transient": True}, format="json")

    assert sent.status_code == 200 and sent.json()["turn"]["status"] == "completed"
    assert not Compaction.objects.exists() and not Checkpoint.objects.exists()
    assert not Block.objects.filter(folded=True).exists()


def test_a_transient_send_that_would_pass_max_tokens_is_refused_and_compacts_nothing(
    api, define, studio_conf
):
    studio_conf(COMPACTION_RUNNER="none")  # the normal sends' compactions stay queued, unrun
    define("dm", memory_enabled=False, max_tokens=1000, compaction_type="sliding-window")
    for _ in range(3):
        api.post("/api/v1/agents/dm/messages", {"content": LONG}, format="json")
    Compaction.objects.all().delete()  # what the normal sends queued: not this test's
    blocks_before = list(Block.objects.values_list("number", "folded"))

    refused = api.post("/api/v1/agents/dm/messages", {"content": LONG, "transient": True}, format="json")

    assert refused.status_code == 413
    assert error_of(refused)["code"] == "context_too_large"
    assert "leaves no trace" in error_of(refused)["message"]
    assert not Compaction.objects.exists()
    assert list(Block.objects.values_list("number", "folded")) == blocks_before


@pytest.fixture
def window_of_three(studio_conf):
    """A forced checkpoint once the oldest verbatim block has aged 3 blocks;
    compactions queued, run by the test."""
    studio_conf(FORCED_CHECKPOINT_BLOCKS=3, COMPACTION_RUNNER="none", COMPACTION_KEEP_RATIO=0.9)


def forced_checkpoint_folds_all_but_the_newest(agent) -> bool:
    newest = Checkpoint.objects.filter(agent=agent).order_by("-id").first()
    return (
        newest is not None
        and newest.kind == CheckpointKind.FORCED
        and newest.through_block == agent.blocks.order_by("-number").first().number - 1
    )


def run_queued(agent) -> None:
    for compaction in Compaction.objects.filter(agent=agent, status=CompactionStatus.QUEUED):
        compaction_run(str(compaction.uuid))


def test_a_forced_checkpoint_asked_while_a_compaction_is_queued_is_not_absorbed(define, window_of_three):
    agent = define("dm", memory_enabled=False, max_tokens=100_000)
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    compaction_request(agent=agent, reason=CompactionReason.THRESHOLD)  # live, keeps nearly everything

    for n in range(3, 6):  # the window fills: the forced one is asked for
        turn_send(agent=agent, content=f"m{n}")
    run_queued(agent)

    assert forced_checkpoint_folds_all_but_the_newest(agent)


def test_a_forced_checkpoint_asked_while_a_compaction_runs_follows_it(define, window_of_three, monkeypatch):
    agent = define("dm", memory_enabled=False, max_tokens=100_000)
    turn_send(agent=agent, content="m1")
    turn_send(agent=agent, content="m2")
    # Asked for by hand: it folds block 1, its model call held open until
    # the window has filled.
    filled, summarizing = threading.Event(), threading.Event()
    original = ScriptedProvider.summarize

    def summarize(self, request):
        summarizing.set()
        assert filled.wait(30)
        return original(self, request)

    monkeypatch.setattr(ScriptedProvider, "summarize", summarize)
    running = compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    thread, _ = in_thread(compaction_run, str(running.uuid))
    assert summarizing.wait(30)

    for n in range(3, 6):  # the window fills while it runs
        turn_send(agent=agent, content=f"m{n}")
    filled.set()
    thread.join(30)
    monkeypatch.setattr(ScriptedProvider, "summarize", original)
    run_queued(agent)

    assert Compaction.objects.get(pk=running.pk).status == CompactionStatus.DONE
    assert forced_checkpoint_folds_all_but_the_newest(agent)


def test_a_forced_checkpoint_is_judged_on_the_checkpoint_in_force_when_the_turn_ends(
    define, window_of_three, monkeypatch
):
    agent = define("dm", memory_enabled=False, max_tokens=100_000)
    for n in range(1, 4):
        turn_send(agent=agent, content=f"m{n}")
    # Block 4's model call waits while a compaction folds blocks 1-3: when
    # the turn ends, its oldest verbatim block is 4 itself, aged nothing.
    folded, calls = threading.Event(), []
    original = ScriptedProvider.complete

    def complete(self, request, control):
        calls.append(1)
        if request.messages[-1]["content"] == "m4":
            assert folded.wait(30)
        return original(self, request, control)

    monkeypatch.setattr(ScriptedProvider, "complete", complete)
    thread, _ = in_thread(turn_send, agent=agent, content="m4")
    wait_for(lambda: calls)
    manual = compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    compaction_run(str(manual.uuid))
    folded.set()
    thread.join(30)

    assert Checkpoint.objects.get(agent=agent).through_block == 3
    assert not Compaction.objects.filter(agent=agent, reason=CompactionReason.FORCED).exists()


def test_a_threshold_compaction_is_judged_on_the_checkpoint_in_force_when_the_turn_ends(
    define, studio_conf, monkeypatch
):
    """A turn that started over the soft threshold, during which a
    compaction folded the history, queues no second compaction (and its
    model call, billed to the game) when it ends: it started with the old
    checkpoint, but the context it leaves is the new one's."""
    studio_conf(COMPACTION_RUNNER="none")
    agent = define("dm", memory_enabled=False, max_tokens=1000)
    for _ in range(2):
        turn_send(agent=agent, content=LONG)
    Compaction.objects.all().delete()  # what those sends queued: not this test's
    # The third LONG's model call waits while a compaction folds blocks 1-2.
    folded, calls = threading.Event(), []
    original = ScriptedProvider.complete

    def complete(self, request, control):
        calls.append(1)
        if len(request.messages) > 3:  # the third send's, with blocks 1-2 before it
            assert folded.wait(30)
        return original(self, request, control)

    monkeypatch.setattr(ScriptedProvider, "complete", complete)
    thread, result = in_thread(turn_send, agent=agent, content=LONG)
    wait_for(lambda: calls)
    manual = compaction_request(agent=agent, reason=CompactionReason.MANUAL)
    compaction_run(str(manual.uuid))
    folded.set()
    thread.join(30)

    assert Checkpoint.objects.get(agent=agent).through_block == 2
    assert list(Compaction.objects.filter(agent=agent).values_list("reason", flat=True)) == [
        CompactionReason.MANUAL
    ]
