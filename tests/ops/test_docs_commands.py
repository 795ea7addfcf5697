"""The docs' shell steps, run as written. Every ```sh block of README.md and
docs/operating.md that an HTML comment marks runnable (`<!-- runnable -->`,
or `<!-- runnable: without systemctl -->`) is run, in order, in a scratch
environment standing for the operator's machine:

- a checkout of this code of its own where the docs say /srv/studio, and a
  folder of its own where they say /var/backups/studio;
- a PostgreSQL cluster of its own (PGHOST, PGPORT), so the docs' `studio`
  role and database are created, dropped and restored as written;
- `sudo -u USER COMMAND` runs COMMAND as USER would reach PostgreSQL
  (PGUSER=USER): the tests run as one user;
- a web process on the port the docs name (127.0.0.1:8001, here a free
  port) for a block that asks it, started as the web unit starts it;
- `without systemctl`: the block's `systemctl` lines are left out (this
  machine runs no systemd), the web process stopped for it as
  `systemctl stop studio.target` would.

A step that fails as written — exits non-zero, never ends, or prints an
error in the API's shape — fails the test, naming the block."""

import os
import re
import shutil
import socket
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from bench.launcher import free_port
from tests.support.deploy import daphne_options
from tests.support.deployment import NOT_INHERITED, ROOT
from tests.support.private_postgres import PrivatePostgres, postgres_bin

pytestmark = [
    pytest.mark.skipif(postgres_bin() is None, reason="PostgreSQL's server binaries are not installed"),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the docs' studio uses Redis"),
]

MARKER = re.compile(r"<!-- runnable(?::\s*(?P<options>[^>]*?))?\s*-->")
BLOCK_SECONDS = 300
WEB_PORT_IN_DOCS = "127.0.0.1:8001"
SUDO = """#!/bin/sh
# `sudo -u USER COMMAND...` in the docs' steps: COMMAND, reaching PostgreSQL as USER.
[ "$1" = "-u" ] || { echo "the scratch sudo takes -u USER only" >&2; exit 2; }
user=$2
shift 2
PGUSER=$user exec "$@"
"""


class Block:
    def __init__(self, path: Path, line: int, options: str, text: str):
        self.path, self.line, self.options, self.text = path, line, options, text

    def __repr__(self) -> str:
        return f"{self.path.relative_to(ROOT)}, the block at line {self.line}"


def runnable_blocks(path: Path) -> list[Block]:
    lines, blocks = path.read_text().splitlines(), []
    for index, line in enumerate(lines):
        marker = MARKER.fullmatch(line.strip())
        if not marker:
            continue
        fence = lines[index + 1]
        assert fence.strip() == "```sh", (
            f"{path.name}:{index + 1}: a runnable marker must be followed by ```sh"
        )
        indent = fence[: len(fence) - len(fence.lstrip())]
        end = next(i for i in range(index + 2, len(lines)) if lines[i].strip() == "```")
        body = "\n".join(line.removeprefix(indent) for line in lines[index + 2 : end])
        blocks.append(Block(path, index + 2, marker["options"] or "", textwrap.dedent(body)))
    return blocks


def scratch_checkout(folder: Path) -> Path:
    """This code (its uncommitted changes too), checked out in `folder`, its virtualenv linked."""
    this_code = git(ROOT, "stash", "create") or git(ROOT, "rev-parse", "HEAD")
    git(ROOT, "clone", "--quiet", "--shared", "--no-checkout", str(ROOT), str(folder))
    git(folder, "checkout", "--quiet", "--detach", this_code)
    (folder / ".venv").symlink_to(ROOT / ".venv")
    return folder


def git(folder: Path, *arguments: str) -> str:
    return subprocess.run(
        ["git", *arguments], cwd=folder, capture_output=True, text=True, check=True
    ).stdout.strip()


class Scratch:
    """The operator's machine, as the module's docstring says."""

    def __init__(self, folder: Path, **environment: str):
        self.folder = folder
        self.checkout = scratch_checkout(folder / "srv-studio")
        self.backups = folder / "backups"
        self.web: subprocess.Popen | None = None
        self.web_port = free_port()
        bin_folder = folder / "bin"
        bin_folder.mkdir()
        (bin_folder / "sudo").write_text(SUDO)
        (bin_folder / "sudo").chmod(0o755)
        inherited = {
            name: value
            for name, value in os.environ.items()
            if name not in NOT_INHERITED and not name.startswith(("STUDIO_", "DJANGO_"))
        }
        self.environment = {
            **inherited,
            "PATH": f"{bin_folder}:{os.environ['PATH']}",
            "STUDIO_BACKUP_DIR": str(self.backups),
            "STUDIO_RUN_DIR": str(folder / "run"),
            # What the docs' .env points at, on this machine: the test run's Redis, events and queues of its own.
            "REDIS_URL": settings.REDIS_URL,
            "STUDIO_CHANNEL_PREFIX": f"{settings.CHANNEL_PREFIX}.docs{uuid.uuid4().hex[:6]}",
            **environment,
        }

    def as_here(self, text: str) -> str:
        """The block's paths and port, this machine's."""
        for old, new in {
            "/srv/studio": str(self.checkout),
            "/var/backups/studio": str(self.backups),
            WEB_PORT_IN_DOCS: f"127.0.0.1:{self.web_port}",
            "http://127.0.0.1:8000": f"http://127.0.0.1:{self.web_port}",
        }.items():
            text = text.replace(old, new)
        return text

    def run(self, block: Block) -> None:
        text = self.as_here(block.text)
        if "without systemctl" in block.options:
            text = "\n".join(
                f": {line.strip()}  # left out here" if line.strip().startswith("systemctl ") else line
                for line in text.splitlines()
            )
        try:
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", text],
                cwd=self.checkout,  # where a reader of the README is; operating.md's blocks cd themselves
                env=self.environment,
                capture_output=True,
                text=True,
                timeout=BLOCK_SECONDS,
            )
        except subprocess.TimeoutExpired as stuck:
            raise AssertionError(
                f"{block} never ended:\n{block.text}\n{stuck.stdout}\n{stuck.stderr}"
            ) from None
        said = done.stdout + done.stderr
        assert done.returncode == 0, f"{block} failed (exit {done.returncode}):\n{block.text}\n---\n{said}"
        assert '{"error": {"code"' not in said, f"{block} was answered an error:\n{block.text}\n---\n{said}"

    def web_start(self) -> None:
        """A web process of the scratch checkout on the docs' port, as the web unit starts it."""
        command = [str(self.checkout / ".venv" / "bin" / "daphne"), *daphne_options()]
        command += ["-b", "127.0.0.1", "-p", str(self.web_port), "studio.asgi:application"]
        with open(self.folder / "web.log", "w") as out:
            self.web = subprocess.Popen(
                command,
                cwd=self.checkout,
                env={**self.environment, "STUDIO_DB_POOL": "1"},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_listening(self.web_port)

    def web_stop(self) -> None:
        if self.web is not None:
            self.web.terminate()
            try:
                self.web.wait(30)
            except subprocess.TimeoutExpired:
                self.web.kill()
            self.web = None


@pytest.fixture
def scratch(tmp_path):
    made = []

    def make(**environment) -> Scratch:
        made.append(Scratch(tmp_path / f"machine{len(made)}", **environment))
        return made[-1]

    yield make
    for machine in made:
        machine.web_stop()


@pytest.fixture
def private_postgres():
    cluster = PrivatePostgres()
    yield cluster
    cluster.stop()


def test_operating_md_runs_as_written(scratch, private_postgres):
    blocks = runnable_blocks(ROOT / "docs" / "operating.md")
    machine = scratch(**private_postgres.environment(), PGUSER="studio")
    assert len(blocks) >= 6, (
        blocks
    )  # the install's PostgreSQL, configure, migrate, readiness, backup, restore…

    for block in blocks:
        if WEB_PORT_IN_DOCS in block.text:
            machine.web_start()
        machine.run(block)
        machine.web_stop()

    backups = list(machine.backups.glob("studio-*.dump"))
    assert backups, "the backup block made no backup"


def test_the_readmes_try_it_runs_as_written_against_make_runs_studio(scratch):
    blocks = runnable_blocks(ROOT / "README.md")
    machine = scratch()
    assert blocks, "README.md marks no block runnable"
    serve_as_make_run_does(machine)

    for block in blocks:
        machine.run(block)


def serve_as_make_run_does(machine: Scratch) -> None:
    """The Makefile's `run` recipe in the scratch checkout (but for installing), on the docs' port."""
    env = {**machine.environment, "DJANGO_DEBUG": "true"}
    python = str(machine.checkout / ".venv" / "bin" / "python")
    for step in (["migrate", "--noinput"], ["seed_demo", "--url", f"http://127.0.0.1:{machine.web_port}"]):
        done = subprocess.run(
            [python, "manage.py", *step], cwd=machine.checkout, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    with open(machine.folder / "web.log", "w") as out:
        machine.web = subprocess.Popen(
            [python, "manage.py", "runserver", "--noreload", f"127.0.0.1:{machine.web_port}"],
            cwd=machine.checkout,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_listening(machine.web_port)


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port}")


def test_a_marker_without_a_block_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- runnable -->\nno block here\n")

    with pytest.raises(AssertionError, match="must be followed by"):
        runnable_blocks(page)


def test_the_blocks_found_are_those_marked(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\nnot marked\n```\n\n<!-- runnable -->\n```sh\necho one\n```\n\n"
        "1. a step\n\n   <!-- runnable: without systemctl -->\n   ```sh\n   systemctl stop x\n   echo two\n   ```\n"
    )

    blocks = runnable_blocks(page)

    assert [(block.options, block.text) for block in blocks] == [
        ("", "echo one"),
        ("without systemctl", "systemctl stop x\necho two"),
    ]
    assert shutil.which("bash")
