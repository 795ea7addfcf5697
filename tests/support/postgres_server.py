"""A PostgreSQL cluster of a test's own — `initdb` and `pg_ctl` in a folder
of its own, on a free port — so stopping it (an outage) disturbs nothing
else: not this machine's PostgreSQL, nor other tests' databases. Run as
the `postgres` user when the tests run as root (PostgreSQL refuses root),
with trust authentication on 127.0.0.1 only."""

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]


def postgres_bin() -> Path | None:
    """The folder of this machine's newest PostgreSQL server programs."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


class Postgres:
    """One cluster, one database (`studio`), migrated by the studio's own
    `manage.py migrate`: `start`, `stop` (fast: sessions are cut, as in an
    outage), `remove`."""

    def __init__(self):
        self.bin = postgres_bin()
        self.port = free_port()
        # Not under pytest's temporary folder: the postgres user must reach it.
        self.folder = Path(tempfile.mkdtemp(prefix="studio-pg-"))
        self.data = self.folder / "data"
        self.user = "postgres" if os.getuid() == 0 else None
        if self.user:
            os.chown(self.folder, pwd.getpwnam(self.user).pw_uid, -1)
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/studio"

    def _run(self, *command, check=True) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        return subprocess.run([*prefix, *map(str, command)], capture_output=True, text=True, check=check)

    def create(self) -> "Postgres":
        """initdb, start, createdb and migrate: a studio database ready to serve."""
        self._run(self.bin / "initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()
        self._run(self.bin / "createdb", "-h", "127.0.0.1", "-p", self.port, "-U", "postgres", "studio")
        self.manage("migrate", "--noinput")
        return self

    def is_running(self) -> bool:
        return self._run(self.bin / "pg_ctl", "-D", self.data, "status", check=False).returncode == 0

    def start(self) -> None:
        """Start it (again); harmless when it runs."""
        if self.is_running():
            return
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = self.folder / "server.log"
        self._run(self.bin / "pg_ctl", "-D", self.data, "-o", options, "-l", log, "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stop it as an outage does: every session cut at once."""
        self._run(self.bin / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop", check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def manage(self, *args: str) -> str:
        """`manage.py` on this database; its output."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": self.url},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def game_key(self, slug: str) -> str:
        """A new game on this database, with credits, and an admin key for it."""
        return self.manage("creategame", slug, "--credits", "1000").strip().splitlines()[-1]
