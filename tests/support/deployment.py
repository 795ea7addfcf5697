"""A deployment of the studio as scripts/studioctl sees one: a checkout, a
`.env` holding its settings (as docs/operating.md's Configure step writes
it), the Procfile's processes run by scripts/start.sh, and the command
run as an operator runs it."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from bench.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]
# What an operator's shell would not have: the test run's own settings,
# which would win over the deployment's .env.
NOT_INHERITED = ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR", "PROCFILE", "PORT", "PORT2")


class Deployment:
    """The checkout at `root`, configured by the .env file `settings` make,
    its processes' pid files and metrics under `folder`."""

    def __init__(self, root: Path, folder: Path, settings: dict[str, str], **environment: str):
        self.root, self.folder = root, folder
        self.ports = [free_port(), free_port()]
        self.env_file = folder / "studio.env"
        self.env_file.write_text("".join(f"{name}={value}\n" for name, value in settings.items()))
        (folder / "metrics").mkdir(exist_ok=True)
        inherited = {
            name: value
            for name, value in os.environ.items()
            if name not in NOT_INHERITED and not name.startswith(("STUDIO_", "DJANGO_"))
        }
        self.environment = {
            **inherited,
            "STUDIO_ENV_FILE": str(self.env_file),
            "STUDIO_RUN_DIR": str(folder / "run"),
            "PROMETHEUS_MULTIPROC_DIR": str(folder / "metrics"),
            "PORT": str(self.ports[0]),
            "PORT2": str(self.ports[1]),
            **environment,
        }

    def ctl(self, *arguments: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        """scripts/studioctl run as an operator would, from the checkout."""
        done = subprocess.run(
            [sys.executable, str(self.root / "scripts" / "studioctl"), *arguments],
            cwd=self.root,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check:
            assert done.returncode == 0, f"studioctl {' '.join(arguments)}:\n{done.stdout}\n{done.stderr}"
        return done

    def status(self) -> dict:
        return json.loads(self.ctl("status", "--json", check=False).stdout)

    def manage(self, *arguments: str, **environment: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.root / ".venv" / "bin" / "python"), "manage.py", *arguments],
            cwd=self.root,
            env={**self.environment, **environment},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def pids(self) -> dict[str, int]:
        return {row["name"]: row["pid"] for row in self.status()["processes"]}

    def tear_down(self) -> None:
        """Stop whatever still runs: `studioctl stop`, then SIGKILL to what is left."""
        start = self.folder / "run" / "start.pid"
        if start.exists():
            self.ctl("stop", check=False, timeout=600)
        for pid_file in (self.folder / "run").glob("*.pid"):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass
