"""`manage.py` run as an operator runs it: a process of its own, with the
environment the test gives it."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The test run's own key (tests/environment.py): strong, not a development one.
STRONG_KEY = os.environ["DJANGO_SECRET_KEY"]


def manage(*args: str, **env: str | None) -> subprocess.CompletedProcess:
    """`manage.py <args>` with DEBUG off, a strong key and none of this
    process's other DJANGO_/STUDIO_ settings; then `env`, where None leaves a
    variable unset."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "STUDIO_"))}
    base.update(
        DJANGO_SETTINGS_MODULE="studio.settings",
        DJANGO_SECRET_KEY=STRONG_KEY,
    )
    base.update(env)
    base = {k: v for k, v in base.items() if v is not None}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60
    )
