"""What both real providers do alike, each through its official SDK against
its fake on loopback: the reply streams as the model writes it, a cancel
stops reading the stream, a stream that breaks off fails the turn, and
what is offered (tools, and their tokens in the context)."""

import json

import pytest

from agents.models import TurnStatus
from agents.providers import provider_for
from agents.providers.base import CALL_THREADS, Cancelled, Control, ModelRequest
from agents.sending.context import context_assemble
from billing.models import CostLine
from studio.tokens import count_tokens
from tests.support.providers import NoControl
from tests.support.sending import turn_send

from ..conftest import wait_for

TEXT = "The ferryman lifts his lantern and points across the black water."


def request_for(on_text) -> ModelRequest:
    messages = [{"role": "user", "content": "Who is there?"}]
    return ModelRequest(
        system="You are the ferryman.", context_block=None, messages=messages, tools=[], on_text=on_text
    )


def test_the_reply_streams_in_pieces_while_the_model_writes_it(provider):
    provider.push(provider.say(TEXT, pause=0.05))
    pieces, answered_then = [], []

    def on_text(piece):
        pieces.append(piece)
        answered_then.append(list(provider.fake.answered))

    reply = provider_for(provider.model).complete(request_for(on_text), NoControl())

    assert reply.text == "".join(pieces) == TEXT
    assert len(pieces) > 1
    assert answered_then[0] == []  # the first piece came before the answer was all sent
    assert provider.bodies[0]["stream"] is True


class CancelOnFirstPiece(Control):
    """A turn cancelled once the first piece of its reply has arrived."""

    def __init__(self):
        self.pieces: list[str] = []

    def check(self) -> None:
        if self.pieces:
            raise Cancelled()

    def sleep(self, seconds: float) -> None:
        self.check()


def test_a_cancel_stops_the_text_at_once_and_the_call_ends_with_its_usage(provider):
    provider.push(provider.say(TEXT, pause=0.05))
    control = CancelOnFirstPiece()

    with pytest.raises(Cancelled) as stopped:
        provider_for(provider.model).complete(request_for(control.pieces.append), control)
    ends = []
    stopped.value.call.when_ended(ends.append)
    wait_for(lambda: ends)

    assert len(control.pieces) == 1  # no text after the cancel
    assert provider.fake.answered == [200]  # read to its end, in the background
    assert ends[0].usage.input_tokens == 100 and ends[0].text == TEXT


def test_an_abandoned_call_is_closed_unfinished_past_its_read_limit(provider, studio_conf):
    studio_conf(MODEL_TIMEOUT_SECONDS=0.3)
    provider.push(provider.say(TEXT, pause=0.2))
    control = CancelOnFirstPiece()

    with pytest.raises(Cancelled) as stopped:
        provider_for(provider.model).complete(request_for(control.pieces.append), control)
    assert CALL_THREADS.wait_quiet(60)  # the call has ended
    ends = []
    stopped.value.call.when_ended(ends.append)

    assert provider.fake.answered == []  # the rest of the stream was never read
    assert ends[0].reached and ends[0].text and ends[0].text != TEXT


def test_a_stream_that_breaks_off_fails_the_turn_and_charges_what_was_sent(provider, define):
    agent = define("dm", model=provider.model)
    provider.push(provider.say(TEXT, cut_after=4))

    turn = turn_send(agent=agent, content="Who is there?")

    assert (turn.status, turn.reply, turn.error_code) == (TurnStatus.FAILED, "", "model_error")
    assert "broke off" in turn.error
    # What the provider bills: as it reported at the start (Anthropic), or
    # the input the studio sent (OpenAI, which reports usage last).
    assert CostLine.objects.get(turn_id=turn.uuid, kind="model").detail["inputTokens"] > 0


def test_a_stream_read_to_its_end_is_the_reply_and_its_usage(provider, define):
    agent = define("dm", model=provider.model)
    provider.push(provider.call("open_memory", {"name": "quest"}), provider.say(TEXT))

    turn = turn_send(agent=agent, content="Who is there?")

    assert (turn.status, turn.reply) == (TurnStatus.COMPLETED, TEXT)
    line = CostLine.objects.get(turn_id=turn.uuid, kind="model")
    assert (line.detail["calls"], line.detail["inputTokens"], line.detail["outputTokens"]) == (2, 200, 40)
    wait_for(lambda: provider.fake.answered == [200, 200])


# --- what is offered ------------------------------------------------------------------------


def test_the_context_counts_the_tools_as_the_server_receives_them(provider, define):
    agent = define("dm", model=provider.model)
    provider.push(provider.say("Hm."))

    turn_send(agent=agent, content="Hello")

    tokens = context_assemble(agent).tokens()
    received = json.dumps(provider.bodies[0]["tools"], ensure_ascii=False)
    assert tokens["tools"] == count_tokens(received) > 0
    assert tokens["estimate"] is True  # cl100k is not the model's own tokenizer


@pytest.mark.parametrize("transient", [True, False], ids=["a transient send", "memory off"])
def test_a_send_without_memory_tools_offers_no_tools(provider, define, transient):
    agent = define("dm", model=provider.model, memory_enabled=transient)
    provider.push(provider.say("Between us."))

    turn = turn_send(agent=agent, content="Psst.", transient=transient)

    assert turn.status == TurnStatus.COMPLETED
    assert "tools" not in provider.bodies[0]
    assert "tool_choice" not in provider.bodies[0]
