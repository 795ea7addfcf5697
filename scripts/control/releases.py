"""Upgrades and their rollback."""

import json
import shlex
import shutil
import sys
from pathlib import Path

from .backups import Backups, ledger_said, state_read
from .base import ROOT, Failed, git, manage, run, say, stamp
from .commands import release_here, web_wait_ready
from .database import Database
from .processes import SystemdProcesses, supervisor


def command_upgrade(args) -> int:
    database, backups, processes = Database.of_deployment(), Backups(), supervisor(args.supervisor)
    target = preflight(args.release, database, backups)
    if args.dry_run:
        return 0
    confirm(args, f"Stop the studio, back it up and upgrade it to {args.release}?")
    backup = backups.take(database, label="before-upgrade")
    say(f"backed up to {backup}")
    database.job_ran("backup")
    previous = git("rev-parse", "HEAD")
    backups.state_path().write_text(json.dumps({
        "previous": previous, "previousRelease": release_here(), "release": args.release,
        "commit": target, "backup": str(backup), "at": stamp(),
    }, indent=2) + "\n")  # fmt: skip
    say("stopping the studio")
    processes.stop(args.timeout)
    try:
        release_switch(target, args.install_command, processes)
        say("migrating")
        manage("migrate", "--noinput", quiet=False)
        start_again(processes, args.timeout)
    except Failed as error:
        raise Failed(
            f"{error}\nThe upgrade stopped here; `studioctl rollback` returns to {release_of(previous)}."
        ) from None
    say(
        f"upgraded to {release_here()}; `studioctl rollback` goes back to {release_of(previous)} and the backup"
    )
    return 0


def preflight(release: str, database: Database, backups: Backups) -> str:
    """Check what an upgrade needs before anything changes; the release's commit."""
    try:
        target = git("rev-parse", "--verify", "--quiet", f"{release}^{{commit}}")
    except Failed:
        raise Failed(f"{release!r} names no commit here (`git fetch --tags` first?).") from None
    head = git("rev-parse", "HEAD")
    problems = []

    def check(ok: bool, good: str, bad: str) -> None:
        say(f"  {'ok ' if ok else 'NO '} {good if ok else bad}")
        if not ok:
            problems.append(bad)

    say(f"pre-flight: from {release_here()} to {release} ({target[:7]})")
    check(target != head, "the release is not the one running", "the release is the one running already")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    check(not dirty, "the checkout has no local changes", f"the checkout has local changes:\n{dirty}")
    try:
        size, creates = database.size(), database.may_create_databases()
        check(True, f"PostgreSQL answers ({database.name}: {size / 2**20:.0f} MB)", "")
    except Failed as error:
        check(False, "", f"PostgreSQL does not answer: {error}")
        size, creates = 0, False
    check(creates, "the database role may create databases (a rollback restores into a new one)",
          "the database role may not create databases, which a rollback needs: "
          "sudo -u postgres psql -c 'ALTER ROLE <role> CREATEDB'")  # fmt: skip
    backups.ensure_dir()
    free, needed = shutil.disk_usage(backups.dir).free, size + 2**28
    check(free >= needed, f"{free / 2**30:.1f} GB free for the backup in {backups.dir}",
          f"{free / 2**30:.1f} GB free in {backups.dir}, less than the database's size and 256 MB")  # fmt: skip
    free = shutil.disk_usage(ROOT).free
    check(free >= 2**29, f"{free / 2**30:.1f} GB free for the code and its packages",
          f"{free / 2**30:.1f} GB free in {ROOT}: less than 512 MB")  # fmt: skip
    added = git(
        "diff", "--name-only", "--diff-filter=A", head, target, "--", "*/migrations/[0-9]*.py"
    ).split()
    say(f"  --  migrations the release adds ({len(added)}): {', '.join(added) or 'none'}")
    if problems:
        raise Failed("pre-flight failed; nothing was changed.")
    return target


def confirm(args, question: str) -> None:
    if args.yes:
        return
    if not sys.stdin.isatty() or input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise Failed("not confirmed (--yes to run it without asking).")


def release_switch(commit: str, install_command: str, processes) -> None:
    """The code and packages of `commit`, changed while nothing runs (a
    running process still imports modules as it first needs them)."""
    say(f"checking out {commit[:7]}")
    git("checkout", "--quiet", commit)
    say(f"installing: {install_command}")
    run(["sh", "-c", install_command], quiet=False)
    manage("check", "--deploy", "--fail-level", "WARNING")
    manage("collectstatic", "--noinput", "-v", "0")
    if isinstance(processes, SystemdProcesses):
        processes.units_install()


def start_again(processes, timeout: float) -> None:
    say("starting the studio")
    processes.start()
    web_wait_ready(processes, timeout)


def release_of(commit: str) -> str:
    try:
        return git("describe", "--tags", "--always", commit)
    except Failed:
        return commit[:7]


def command_rollback(args) -> int:
    """The release before the last upgrade, on the database as it was: the
    backup restored into a new, empty database, checked, then swapped in
    for the upgraded one (kept, renamed, until the operator drops it)."""
    database, backups, processes = Database.of_deployment(), Backups(), supervisor(args.supervisor)
    if not backups.state_path().exists():
        raise Failed(f"no upgrade to roll back: {backups.state_path()} is missing.")
    state = state_read(backups)
    dump = Path(state["backup"])
    if not dump.exists():
        raise Failed(f"the backup taken before the upgrade, {dump}, is gone.")
    say(f"rolling back from {release_here()} to {state['previousRelease']}, with {dump.name}")
    say("what the studio did since the upgrade (turns, charges, keys) is lost with it")
    confirm(args, "Stop the studio and roll it back?")
    say("stopping the studio")
    processes.stop(args.timeout)
    release_switch(state["previous"], args.install_command, processes)
    when = stamp()[2:-1].replace("T", "")
    restored, kept = f"{database.name}_rollback_{when}", f"{database.name}_upgraded_{when}"
    restore_checked(database, dump, restored)
    swap(database, restored, kept)
    backups.state_path().rename(backups.dir / f"rolled-back-{stamp()}.json")
    start_again(processes, args.timeout)
    say(f"rolled back to {release_here()}. The upgraded database is kept as {kept}: once you are sure,")
    say(f"  psql -d {shlex.quote(database.url_of('postgres'))} -c 'DROP DATABASE \"{kept}\"'")
    return 0


def restore_checked(database: Database, dump: Path, name: str) -> None:
    say(f"restoring {dump.name} into a new database, {name}")
    database.create(name)
    try:
        database.restore_into(dump, name)
        manage("migrate", "--check", database_url=database.url_of(name))
        say("  " + ledger_said(manage("checkledger", database_url=database.url_of(name))))
    except Failed:
        database.drop(name)
        raise


def swap(database: Database, restored: str, kept: str) -> None:
    """`restored` takes the deployment's database's name; the old one is kept as `kept`."""
    say(f"swapping it in: {database.name} becomes {kept}, {restored} becomes {database.name}")
    try:
        database.rename(database.name, kept)
    except Failed as error:
        database.drop(restored)
        sessions = database.sessions_on(database.name)
        raise Failed(f"{database.name} could not be renamed ({sessions or error}); nothing changed") from None
    database.rename(restored, database.name)
