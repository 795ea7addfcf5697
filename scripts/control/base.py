"""What every part of the control command needs: the checkout, the studio's
settings as its processes read them, running commands (as the checkout's
owner), and waiting."""

import datetime
import os
import pwd
import re
import shlex
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTING = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)")
NAME = re.compile(r"[A-Za-z0-9_]{1,63}")
UNITS = Path("/etc/systemd/system")
BACKUP_STEM = re.compile(r".+-\d{8}T\d{6}Z(-[\w.]+)?\.dump")
STATE_FILE = "upgrade.json"


class Failed(Exception):
    """What stops a command, said to the operator (exit status 1)."""


# --- settings: the environment, then .env, as every studio process reads them ---------------


def env_file() -> dict[str, str]:
    """The `.env` file's settings, read by studio/envfile.py's rules (one
    NAME=value a line, # comment lines, matching quotes dropped)."""
    path = Path(os.environ.get("STUDIO_ENV_FILE") or ROOT / ".env")
    values = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            match = SETTING.fullmatch(line.strip())
            if match and not line.strip().startswith("#"):
                value = match[2].strip()
                quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
                values[match[1]] = value[1:-1] if quoted else value
    return values


ENV_FILE = env_file()


def setting(name: str, default: str = "") -> str:
    """A setting as the studio reads it: the environment's, else .env's."""
    value = os.environ.get(name)
    if value is None:
        value = ENV_FILE.get(name, "")
    return value.strip() or default


def run_dir() -> Path:
    """Where scripts/start.sh keeps its pid files: read from the
    environment only, as start.sh reads it."""
    return ROOT / os.environ.get("STUDIO_RUN_DIR", ".run")


def procfile_path() -> Path:
    return ROOT / os.environ.get("PROCFILE", "Procfile")


def host_header() -> str:
    """A Host the studio answers to (DJANGO_ALLOWED_HOSTS's first): a
    probe without one is refused (400) by a studio behind a proxy."""
    for host in setting("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(","):
        host = host.strip().lstrip(".")
        if host and host != "*":
            return host
    return "localhost"


# --- running commands ---------------------------------------------------------------------


def owner() -> pwd.struct_passwd:
    return pwd.getpwuid(ROOT.stat().st_uid)


def as_owner(command: list[str]) -> list[str]:
    """As root, `command` runs as the checkout's owner (peer authentication
    to PostgreSQL, files the studio user can read, git's ownership check)."""
    if os.geteuid() == 0 and owner().pw_uid != 0:
        return ["runuser", "-u", owner().pw_name, "--", *command]
    return command


def run(command: list[str], *, env: dict | None = None, quiet: bool = True, stdin=None) -> str:
    """Run `command` (as the checkout's owner) in the checkout; its output,
    or Failed with what it said."""
    done = subprocess.run(
        as_owner(command),
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdin=stdin,
        capture_output=quiet,
        text=True,
    )
    if done.returncode != 0:
        said = ((done.stderr or "") + (done.stdout or "")).strip() if quiet else ""
        raise Failed(
            f"{shlex.join(command)} exited with status {done.returncode}" + (f":\n{said}" if said else "")
        )
    return (done.stdout or "").strip() if quiet else ""


def manage(*arguments: str, database_url: str | None = None, quiet: bool = True) -> str:
    """`manage.py …` with the checkout's virtualenv (on another database:
    `database_url`, which wins over .env)."""
    env = {"DATABASE_URL": database_url} if database_url else None
    return run([str(ROOT / ".venv" / "bin" / "python"), "manage.py", *arguments], env=env, quiet=quiet)


def git(*arguments: str) -> str:
    return run(["git", *arguments])


def say(text: str = "") -> None:
    print(text, flush=True)


def stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")


def wait_for(found, timeout: float, what: str):
    """`found()`'s first true answer, asked until `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        answer = found()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise Failed(f"gave up after {timeout:g} s waiting for {what}.")
        time.sleep(0.25)
