"""The settings module read afresh under a given environment (the running
process's settings are left alone)."""

import runpy
from pathlib import Path

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "studio" / "settings.py"
# What turns test-only and risky things on; unset unless a test sets them.
GATES = (
    "DJANGO_DEBUG",
    "STUDIO_ALLOW_SCRIPTED_MODEL",
    "STUDIO_ALLOW_UNPRICED_MODELS",
    "STUDIO_DEFAULT_MODEL",
)


def studio_settings(monkeypatch, **env) -> dict:
    """The STUDIO settings under `env`, with the GATES unset but for it."""
    for name in GATES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))["STUDIO"]
