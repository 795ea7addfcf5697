"""A PostgreSQL cluster of a test's own: initdb in a scratch folder, the
server on a Unix socket there (no TCP port), trust authentication, its
superuser `postgres`. Roles and databases named as the docs name them
(`studio`) then collide with nothing on the machine's shared server.
PostgreSQL refuses to run as root: as root, the cluster is the `postgres`
user's."""

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.launcher import free_port


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PrivatePostgres:
    """Reached with `environment()`: PGHOST (the socket's folder) and PGPORT."""

    def __init__(self):
        self.bin = postgres_bin()
        # Not under pytest's tmp_path: its folders are root's alone, and the server runs as postgres.
        self.folder = Path(tempfile.mkdtemp(prefix="studio-private-pg-"))
        self.data, self.socket, self.port = self.folder / "data", self.folder / "socket", free_port()
        self.socket.mkdir()
        if os.geteuid() == 0:
            postgres = pwd.getpwnam("postgres")
            os.chmod(self.folder, 0o755)
            for path in (self.folder, self.socket):
                os.chown(path, postgres.pw_uid, postgres.pw_gid)
        self._as_server(
            self.bin / "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"
        )
        options = f"-c listen_addresses='' -k {self.socket} -p {self.port} -c fsync=off"
        log = str(self.folder / "server.log")
        self._as_server(self.bin / "pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def _as_server(self, *command) -> None:
        command = [str(part) for part in command]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}")

    def environment(self) -> dict[str, str]:
        return {"PGHOST": str(self.socket), "PGPORT": str(self.port)}

    def stop(self) -> None:
        try:
            self._as_server(self.bin / "pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
