"""What the environment turns on: the settings module read afresh under a
given environment (the running process's settings are left alone)."""

import runpy
from pathlib import Path

import pytest

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "studio" / "settings.py"
GATES = ("DJANGO_DEBUG", "STUDIO_ALLOW_SCRIPTED_MODEL", "STUDIO_ALLOW_UNPRICED_MODELS")


def studio_settings(monkeypatch, **env) -> dict:
    for name in GATES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))["STUDIO"]


@pytest.mark.parametrize(
    ("env", "offered"),
    [
        ({}, False),
        ({"DJANGO_DEBUG": "false", "STUDIO_ALLOW_SCRIPTED_MODEL": "0"}, False),
        ({"DJANGO_DEBUG": "true"}, True),
        ({"STUDIO_ALLOW_SCRIPTED_MODEL": "1"}, True),
    ],
)
def test_the_scripted_model_is_offered_only_in_debug_or_when_allowed(monkeypatch, env, offered):
    assert studio_settings(monkeypatch, **env)["ALLOW_SCRIPTED_MODEL"] is offered


@pytest.mark.parametrize(
    ("env", "allowed"),
    [({}, False), ({"DJANGO_DEBUG": "true"}, False), ({"STUDIO_ALLOW_UNPRICED_MODELS": "1"}, True)],
)
def test_unpriced_models_are_allowed_only_when_the_setting_says_so(monkeypatch, env, allowed):
    assert studio_settings(monkeypatch, **env)["ALLOW_UNPRICED_MODELS"] is allowed
