"""A web process settles its heap once loaded: the SDK of each provider it
is configured for is loaded before the first send needs it, and everything
loaded is set aside from the garbage collector's full passes. Each case runs
in a process of its own, as a web process's start would."""

import json

import pytest

from tests.support.commands import manage

pytestmark = pytest.mark.processes

SETTLE = (
    "import gc, json, sys; from studio.runtime.heap import heap_settle; heap_settle(); "
    "print(json.dumps({'openai': 'openai' in sys.modules, 'anthropic': 'anthropic' in sys.modules, "
    "'frozen': gc.get_freeze_count(), 'tracked': len(gc.get_objects())}))"
)
NO_PROVIDER = {
    name: None for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
}


def settled(**env) -> dict:
    completed = manage("shell", "-c", SETTLE, **(NO_PROVIDER | env))
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_the_configured_providers_sdk_is_loaded_and_everything_loaded_is_set_aside():
    heap = settled(OPENAI_BASE_URL="http://127.0.0.1:9/v1")

    assert heap["openai"] is True
    assert heap["anthropic"] is False
    # What the collector still walks is what ran after the settling, not the ~200,000 loaded.
    assert heap["frozen"] > 100_000
    assert heap["tracked"] < heap["frozen"] / 10


def test_a_provider_is_loaded_by_its_key_alone():
    heap = settled(ANTHROPIC_API_KEY="sk-ant-test")

    assert heap["anthropic"] is True
    assert heap["openai"] is False


def test_with_no_provider_configured_no_sdk_is_loaded():
    heap = settled()

    assert heap["openai"] is False
    assert heap["anthropic"] is False
    assert heap["frozen"] > 50_000
