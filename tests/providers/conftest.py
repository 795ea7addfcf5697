"""What the provider tests share: the loopback fakes as fixtures, models
billed without a price row of their own, and `provider`, which runs a test
once against each real provider's fake."""

from dataclasses import dataclass

import pytest

from agents.models import Block
from agents.providers import retries
from tests.support import fake_anthropic, fake_openai
from tests.support.fake_anthropic import fake_anthropic_fixture  # noqa: F401 — the `fake` fixture
from tests.support.fake_openai import fake_openai_fixture  # noqa: F401 — the `fake_openai` fixture
from tests.support.sending import turn_send

# An answer's delay that no test waits out, however loaded the machine: a
# test that must not wait for an answer asserts what happened without it
# (failed on the timeout, ended by the cancel), then lets it go (the fake's
# stop, or its release, ends the delay at once).
LATER_THAN_ANY_WAIT = 300


@pytest.fixture(autouse=True)
def unpriced_models(studio_conf):
    """The test models (`openai:gpt-test`, `anthropic:claude-test`) have no
    price row of their own: these tests bill them at the `*` row's price, as
    a studio that allows unpriced models does (the tests of a model's own
    price add its row)."""
    studio_conf(ALLOW_UNPRICED_MODELS=True)


@pytest.fixture(autouse=True)
def backoff(monkeypatch) -> list[float]:
    """The waits the studio asked for before each retry, in order — made
    at once, so no test waits out a backoff (an abandoned call still ends
    its retries)."""
    waits: list[float] = []

    def wait(abandoned, seconds: float) -> bool:
        waits.append(seconds)
        return abandoned.is_set()

    monkeypatch.setattr(retries, "backoff_wait", wait)
    return waits


# A block's entries when the model called close_memory, then answered.
TOOL_CALL_THEN_REPLY = [("message", "user"), ("tool_call", "close_memory"), ("message", "assistant")]


def entry_kinds(turn) -> list[tuple[str, str]]:
    """Each entry of the turn's block: its type, and its role or tool."""
    return [(e["type"], e.get("role") or e["name"]) for e in Block.objects.get(turn=turn).entries]


def send_each(agent, *contents: str) -> None:
    """One send to `agent` per message, in order."""
    for content in contents:
        turn_send(agent=agent, content=content)


@dataclass
class Provider:
    """One provider's fake, as the tests both providers share drive it:
    `say(text, **streaming)`, `call(name, arguments)`, `refuse(status)` (an
    error status, its retry quick) and `checkpoint(summary)` (the
    compactor's answer) build its answers."""

    model: str
    fake: object
    say: object
    call: object
    refuse: object
    checkpoint: object

    def push(self, *answers) -> None:
        self.fake.push(*answers)

    @property
    def bodies(self) -> list[dict]:
        return self.fake.bodies


def _openai(request) -> Provider:
    return Provider(
        model="openai:gpt-test",
        fake=request.getfixturevalue("fake_openai"),
        say=fake_openai.completion,
        call=lambda name, arguments: fake_openai.completion(
            tool_calls=[fake_openai.tool_call(name, arguments)]
        ),
        refuse=lambda status, **kwargs: fake_openai.error(status, "Refused.", **kwargs),
        checkpoint=lambda summary, **kwargs: fake_openai.compaction_answer(summary, **kwargs),
    )


def _anthropic(request) -> Provider:
    return Provider(
        model="anthropic:claude-test",
        fake=request.getfixturevalue("fake"),
        say=lambda text, **streaming: fake_anthropic.message(fake_anthropic.text(text), **streaming),
        call=lambda name, arguments: fake_anthropic.message(fake_anthropic.tool_use(name, arguments)),
        refuse=lambda status, **kwargs: fake_anthropic.error(status, "api_error", "Refused.", **kwargs),
        checkpoint=lambda summary, **kwargs: fake_anthropic.message(
            fake_anthropic.tool_use("write_checkpoint", {"summary": summary, "memories": []}), **kwargs
        ),
    )


@pytest.fixture(params=[_openai, _anthropic], ids=["openai", "anthropic"])
def provider(request) -> Provider:
    return request.param(request)


def failure_logged(caplog, turn) -> str:
    """What the studio logged of the turn's failed model call: the details a
    game is not told (the provider's address, what its server said), for
    the operator."""
    said = [
        r.getMessage()
        for r in caplog.records
        if str(turn.uuid) in r.getMessage() and "model call failed" in r.getMessage()
    ]
    assert said, "the failure was not logged"
    assert str(turn.uuid) in turn.error  # the game is told where to look
    return said[-1]
