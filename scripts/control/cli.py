"""The command line."""

import argparse
import sys

# --- the command line -----------------------------------------------------------------------
from .base import Failed
from .commands import (
    command_backup,
    command_restart,
    command_rolling_restart,
    command_start,
    command_status,
    command_stop,
)
from .releases import command_rollback, command_upgrade


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="studioctl",
        description="Run a studio deployment: its processes, backups, upgrades and rollback (docs/operating.md).",
    )
    top.add_argument(
        "--supervisor",
        choices=("systemd", "procfile"),
        help="how the processes run (found out when not given)",
    )
    top.add_argument(
        "--timeout",
        type=float,
        default=400,
        help="seconds to wait for a process (default 400: a worker's longest stop)",
    )
    commands = top.add_subparsers(dest="command", required=True)
    status = commands.add_parser(
        "status", help="every process, its readiness, and the periodic jobs' last runs"
    )
    status.add_argument("--json", action="store_true")
    commands.add_parser("start", help="start every process and wait until the web processes are ready")
    commands.add_parser("stop", help="stop every process, each given its time to finish")
    restart = commands.add_parser("restart", help="restart one process (a name `status` shows)")
    restart.add_argument("process")
    commands.add_parser("rolling-restart", help="restart every process, one at a time, serving throughout")
    backup = commands.add_parser(
        "backup", help="pg_dump into STUDIO_BACKUP_DIR, keeping the newest STUDIO_BACKUP_KEEP"
    )
    backup.add_argument("--dir", help="where the dumps go (STUDIO_BACKUP_DIR, /var/backups/studio)")
    backup.add_argument("--keep", type=int, help="how many dumps to keep (STUDIO_BACKUP_KEEP, 14)")
    backup.add_argument(
        "--check", action="store_true", help="then restore the newest into a scratch database and check it"
    )
    for name in ("upgrade", "rollback"):
        sub = commands.add_parser(
            name,
            help="pre-flight, back up, migrate and start a release"
            if name == "upgrade"
            else "go back to the release and database before the last upgrade",
        )
        if name == "upgrade":
            sub.add_argument("release", help="a tag or commit (git fetch --tags first)")
            sub.add_argument("--dry-run", action="store_true", help="the pre-flight checks only")
        sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        sub.add_argument(
            "--install-command",
            default="make install",
            help="what installs the release's packages (make install)",
        )
    return top  # fmt: skip


COMMANDS = {
    "status": command_status,
    "start": command_start,
    "stop": command_stop,
    "restart": command_restart,
    "rolling-restart": command_rolling_restart,
    "backup": command_backup,
    "upgrade": command_upgrade,
    "rollback": command_rollback,
}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except Failed as error:
        print(f"studioctl {args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
