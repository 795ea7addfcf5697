"""The files in deploy/, read as systemd reads them."""

import shlex
from collections import defaultdict
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def unit(name: str) -> dict[str, list[str]]:
    """A unit file's settings: `Key` -> every value it is given, in order."""
    values = defaultdict(list)
    for line in (DEPLOY / name).read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, _, value = line.partition("=")
            values[key.strip()].append(value.strip())
    return values


def daphne_options() -> list[str]:
    """What the web unit passes Daphne before its address and port."""
    command = shlex.split(unit("studio-web@.service")["ExecStart"][0])
    return command[1 : command.index("-b")]
