"""What a provider reports, and what the studio does after a call
returned, never makes a billed call free, never charges past what the
game has, and never gives a hold back twice: a tool call whose name is not
text, usage figures below zero, a count past what the turn held, a bug
after the call, a compaction whose install fails or that two workers ran.
Each through the official SDK against its fake on loopback, or the
scripted model where the compactor's answer is not the point."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from agents import compaction
from agents.compaction import CompactionRetry, compaction_request, compaction_run
from agents.models import Compaction, CompactionReason, CompactionStatus, Turn, TurnStatus
from agents.providers.scripted import ScriptedProvider
from agents.sending import engine, turn_slot
from billing import ledger
from billing.models import Account, CostLine, ModelPrice
from billing.refusals import MoneyRefused
from studio.runtime.leases import lease_kept
from studio.tokens import count_tokens
from tests.support.fake_openai import compaction_answer, completion, tool_call
from tests.support.sending import turn_send

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "openai:gpt-test"


@pytest.fixture
def priced():
    """1 credit per million tokens in, 10 out: 100,000 tokens in is 0.1."""
    ModelPrice.objects.update_or_create(
        model=MODEL, defaults={"input_per_mtok": Decimal(1), "output_per_mtok": Decimal(10)}
    )


def account(game) -> Account:
    return Account.objects.get(game=game)


def model_line(turn) -> CostLine:
    return CostLine.objects.get(turn_id=turn.uuid, kind="model")


def assert_ledger_exact():
    checks = ledger.ledger_check()
    assert all(check.is_consistent for check in checks), checks


def test_a_tool_call_whose_name_is_not_text_is_answered_and_charged(define, fake_openai, game, priced):
    agent = define("dm", model=MODEL)
    odd = {"id": "call_1", "type": "function", "function": {"name": 123, "arguments": "{}"}}
    fake_openai.push(completion(tool_calls=[odd], usage=(100_000, 500)), completion("Done.", usage=(10, 2)))

    turn = turn_send(agent=agent, content="Hello.")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, "Done.")
    line = model_line(turn)
    assert (line.detail["calls"], line.detail["inputTokens"]) == (2, 100_010)
    assert account(game).balance == Decimal(100) - line.amount
    assert_ledger_exact()


def test_a_call_is_charged_when_the_studio_fails_after_it_returned(
    define, fake_openai, game, priced, monkeypatch
):
    agent = define("dm", model=MODEL)
    fake_openai.push(completion("Hi.", usage=(100_000, 500)))

    def broken(reply):
        raise RuntimeError("a bug after the call")

    monkeypatch.setattr(engine, "_storable_reply", broken)
    with pytest.raises(RuntimeError):
        turn_send(agent=agent, content="Hello.")

    turn = Turn.objects.get(agent=agent)
    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "internal_error")
    line = model_line(turn)
    assert (line.detail["inputTokens"], line.detail["outputTokens"]) == (100_000, 500)
    assert account(game).balance == Decimal(100) - line.amount > 0
    assert account(game).held == 0
    assert_ledger_exact()


def test_a_stream_that_broke_off_in_a_tool_call_is_charged_the_call_that_streamed(
    define, fake_openai, game, priced
):
    agent = define("dm", model=MODEL)
    content = "The ferryman's toll is one silver coin, paid before the crossing. " * 100
    call = tool_call(
        "close_memory", {"name": "toll", "description": "What the crossing costs", "content": content}
    )
    # The role, then the call in two pieces; then the connection drops, no usage reported.
    fake_openai.push(completion(tool_calls=[call], usage=None, cut_after=3))

    turn = turn_send(agent=agent, content="What does the crossing cost?")

    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "model_error")
    line = model_line(turn)
    assert line.detail["outputTokens"] >= count_tokens(content)
    assert account(game).held == 0
    assert_ledger_exact()


def test_a_turn_whose_last_commit_failed_after_it_was_made_is_not_charged_twice(
    define, fake_openai, game, priced, monkeypatch
):
    agent = define("dm", model=MODEL)
    fake_openai.push(completion("Hi.", usage=(100_000, 500)))
    commit, finish = BaseDatabaseWrapper.commit, turn_slot.turn_finish
    ending, lost = [], []

    def finishing(*args, **kwargs):
        ending.append(True)
        return finish(*args, **kwargs)

    def commit_then_lose_the_answer(self):
        commit(self)
        if ending and not lost:  # the turn's end, made
            lost.append(True)
            raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(turn_slot, "turn_finish", finishing)
    monkeypatch.setattr(BaseDatabaseWrapper, "commit", commit_then_lose_the_answer)
    with pytest.raises(OperationalError):
        turn_send(agent=agent, content="Hello.")

    assert lost
    turn = Turn.objects.get(agent=agent)
    assert turn.status == TurnStatus.COMPLETED  # it committed
    line = model_line(turn)
    assert line.detail["calls"] == 1
    assert account(game).balance == Decimal(100) - line.amount
    assert_ledger_exact()


def test_usage_below_zero_is_read_as_none_of_that_kind(define, fake_openai, game, priced):
    agent = define("dm", model=MODEL)
    fake_openai.push(completion("Hi.", usage=(100_000, -1_000_000)))

    turn = turn_send(agent=agent, content="Hello.")

    assert turn.status == TurnStatus.COMPLETED
    line = model_line(turn)
    assert (line.detail["inputTokens"], line.detail["outputTokens"]) == (100_000, 0)
    assert line.amount == Decimal("0.1")
    assert account(game).balance == Decimal("99.9")
    assert_ledger_exact()


def test_a_compactors_usage_below_zero_is_charged_what_it_sent(define, fake_openai, game, priced):
    agent = define("dm", model=MODEL, memory_enabled=False)
    fake_openai.push(completion("One.", usage=(10, 5)), completion("Two.", usage=(10, 5)))
    turn_send(agent=agent, content="I pay the ferryman.")
    turn_send(agent=agent, content="And cross.")
    fake_openai.push(compaction_answer("Mara crossed.", usage=(50_000, -1)))

    compaction_request(agent=agent, reason=CompactionReason.MANUAL)

    done = Compaction.objects.get(agent=agent)
    assert done.status == CompactionStatus.DONE
    line = CostLine.objects.get(compaction_id=done.uuid)
    assert (line.detail["inputTokens"], line.detail["outputTokens"]) == (50_000, 0)
    assert account(game).held == 0
    assert_ledger_exact()


def test_a_provider_counting_past_the_hold_takes_the_balance_to_zero_not_below(
    define, fake_openai, game, priced, studio_conf, caplog
):
    studio_conf(MODEL_MAX_OUTPUT_TOKENS=16)
    agent = define("dm", model=MODEL, max_tokens=2000, memory_enabled=False)
    held = ledger.hold_estimate(max_tokens=2000, price=ledger.model_price(MODEL))
    ledger.adjustment_post(game=game, amount=held - account(game).balance, reason="One hold", made_by="t")
    # Another tokenizer: the provider counts far more than the studio did.
    fake_openai.push(completion("Hi.", usage=(2_000_000, 16)))

    turn = turn_send(agent=agent, content="Hello.")

    assert turn.status == TurnStatus.COMPLETED
    assert account(game).balance == 0
    assert account(game).held == 0
    line = model_line(turn)
    assert line.amount == held
    assert line.detail["inputTokens"] == 2_000_000  # what the provider billed, shown
    assert Decimal(line.detail["writtenOff"]) == Decimal("2.00016") - held
    assert "written off" in caplog.text  # operators are told, with the game
    assert_ledger_exact()
    # Nothing left: the next send is refused, not run on credit.
    with pytest.raises(MoneyRefused):
        turn_send(agent=agent, content="Again.")


@pytest.fixture
def folded(define, studio_conf):
    """An agent with two ended blocks to fold, its compactions run here."""
    agent = define("dm", memory_enabled=False, max_tokens=1000)
    turn_send(agent=agent, content="The ferry leaves at dawn.")
    turn_send(agent=agent, content="Mara pays the ferryman.")
    studio_conf(COMPACTION_RUNNER="none")
    return agent


def test_a_compactors_call_is_charged_when_installing_its_answer_fails(folded, game, monkeypatch):
    made = []
    summarize = ScriptedProvider.summarize
    monkeypatch.setattr(
        ScriptedProvider, "summarize", lambda self, r: made.append(summarize(self, r)) or made[-1]
    )

    def broken(**kwargs):
        raise OperationalError("deadlock detected")

    monkeypatch.setattr(compaction, "checkpoint_write", broken)
    pending = compaction_request(agent=folded, reason=CompactionReason.MANUAL)
    with pytest.raises(CompactionRetry):
        compaction_run(str(pending.uuid))

    line = CostLine.objects.get(compaction_id=pending.uuid)
    assert line.detail["calls"] == 1
    assert line.detail["inputTokens"] == made[0].usage.input_tokens > 0
    assert Compaction.objects.get(pk=pending.pk).status == CompactionStatus.QUEUED  # tried again later
    assert account(game).held == 0
    assert_ledger_exact()


def test_a_compaction_two_workers_ran_gives_its_hold_back_once_and_charges_both_calls(
    folded, game, monkeypatch
):
    pending = compaction_request(agent=folded, reason=CompactionReason.MANUAL)
    summarize = ScriptedProvider.summarize
    calls = []

    def second_worker_first(self, request):
        calls.append(1)
        if len(calls) == 1:
            # The first worker's lease lapsed while its call ran; a second
            # worker takes the compaction and finishes it first.
            Compaction.objects.filter(pk=pending.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
            compaction_run(str(pending.uuid))
        return summarize(self, request)

    monkeypatch.setattr(ScriptedProvider, "summarize", second_worker_first)
    compaction_run(str(pending.uuid))

    assert len(calls) == 2
    assert Compaction.objects.get(pk=pending.pk).status == CompactionStatus.DONE
    assert CostLine.objects.get(compaction_id=pending.uuid).detail["calls"] == 2
    assert account(game).held == 0
    assert_ledger_exact()


class _Flaky:
    """A running row's queryset whose first renewal fails."""

    def __init__(self):
        self.renewals = 0

    def update(self, **fields):
        self.renewals += 1
        if self.renewals == 1:
            raise OperationalError("the database went away for a moment")


def test_a_lease_is_renewed_again_after_a_renewal_failed():
    running = _Flaky()
    with lease_kept(running, 0.3, "test"):
        wait_for(lambda: running.renewals >= 3, timeout=30)
