"""The `.env` file: the settings an operator keeps beside the checkout, read
by every process that loads the studio's settings (`manage.py`, Daphne,
Celery) before anything reads the environment.

One `NAME=value` a line; blank lines and lines starting with `#` are
skipped, a leading `export ` is allowed, and a value wrapped in matching
quotes loses them. Nothing else is interpreted: no `$` expansion, no
escapes, no comment after a value (a `#` there is part of it). A variable
already in the environment keeps its value: what a unit, a container or a
shell sets wins over the file.
"""

import os
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

SETTING = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)")


def env_file_path(base_dir: Path) -> Path:
    """STUDIO_ENV_FILE when it is set (in the real environment), else
    `.env` in the project's root."""
    return Path(os.environ.get("STUDIO_ENV_FILE") or base_dir / ".env")


def env_file_read(path: Path) -> dict[str, str]:
    """The settings in the file at `path`; none when there is no file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    values = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = SETTING.fullmatch(line)
        if match is None:
            raise ImproperlyConfigured(
                f"{path}, line {number}, is not a setting: write NAME=value (a # starts a comment line)."
            )
        values[match[1]] = _unquoted(match[2].strip())
    return values


def env_file_load(path: Path) -> list[str]:
    """Set each of the file's variables that the environment lacks; their names."""
    values = env_file_read(path)
    missing = [name for name in values if name not in os.environ.keys()]
    os.environ.update({name: values[name] for name in missing})
    return missing


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value
