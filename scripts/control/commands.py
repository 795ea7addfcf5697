"""The commands that look at and restart the processes, and take backups."""

import json
import re

# --- the commands ---------------------------------------------------------------------------
from .backups import Backups
from .base import ROOT, Failed, git, say, wait_for
from .database import Database
from .processes import Process, healthz, is_ready, proc_rss_mb, proxy_admits, readyz, supervisor


def command_status(args) -> int:
    processes = supervisor(args.supervisor)
    rows = []
    for process in processes.processes():
        row = {"name": process.name, "kind": process.kind, "pid": process.pid, "running": process.running}
        row["starts"] = process.starts
        row["rssMb"] = round(proc_rss_mb(process.pid) or 0, 1) if process.running else None
        if process.kind == "web":
            status, body = readyz(process.port) if process.running and process.port else (0, {})
            row.update(port=process.port, ready=status == 200, readiness=body.get("status", "no answer"))
            row["version"] = (
                healthz(process.port).get("version") if process.running and process.port else None
            )
        rows.append(row)
    jobs = jobs_age()
    healthy = bool(rows) and all(row["running"] and row.get("ready", True) for row in rows)
    report = {"supervisor": processes.name, "supervisorPid": processes.supervisor_pid(), "processes": rows}
    report |= {"jobs": jobs, "healthy": healthy, "release": release_here()}
    if args.json:
        say(json.dumps(report, indent=2))
    else:
        status_print(report)
    return 0 if healthy else 1


def jobs_age() -> dict[str, float]:
    """The periodic jobs' ages, when the database is PostgreSQL and answers."""
    try:
        return Database.of_deployment().jobs_age()
    except Failed:
        return {}


def status_print(report: dict) -> None:
    say(f"studio {report['release']} at {ROOT}, run by {report['supervisor']}")
    say(f"{'process':<20} {'pid':>8} {'starts':>6} {'rss':>9}  state")
    for row in report["processes"]:
        state = "running" if row["running"] else "not running"
        if row["kind"] == "web" and row["running"]:
            state = f"{'ready' if row['ready'] else 'not ready'} ({row['readiness']}) on port {row['port']}"
        rss = f"{row['rssMb']:.0f} MB" if row["rssMb"] is not None else "-"
        say(f"{row['name']:<20} {row['pid'] or '-':>8} {row['starts']:>6} {rss:>9}  {state}")
    if report["jobs"]:
        say("last runs: " + " · ".join(f"{job} {age_text(age)} ago" for job, age in report["jobs"].items()))


def age_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def release_here() -> str:
    """The checkout's version (studio/__init__.py) and commit."""
    text = (ROOT / "studio" / "__init__.py").read_text()
    version = re.search(r'__version__ = "([^"]+)"', text)
    try:
        commit = git("rev-parse", "--short", "HEAD")
    except Failed:
        commit = "?"
    return f"{version[1] if version else '?'} ({commit})"


def command_start(args) -> int:
    processes = supervisor(args.supervisor)
    processes.start()
    web_wait_ready(processes, args.timeout)
    say("started")
    return 0


def web_wait_ready(processes, timeout: float) -> None:
    for process in processes.processes():
        if process.kind == "web":
            wait_for(
                lambda p=process: is_ready(web_now(processes, p.name)), timeout, f"{process.name} to be ready"
            )


def web_now(processes, name: str) -> Process:
    return next(p for p in processes.processes() if p.name == name)


def command_stop(args) -> int:
    supervisor(args.supervisor).stop(args.timeout)
    say("stopped")
    return 0


def command_restart(args) -> int:
    processes = supervisor(args.supervisor)
    process = process_named(processes, args.process)
    restarted(processes, process, args.timeout)
    return 0


def process_named(processes, name: str) -> Process:
    every = processes.processes()
    found = [p for p in every if p.name in (name, f"{name}.service")]
    if not found:
        raise Failed(f"no process {name!r}: the processes are {', '.join(p.name for p in every)}.")
    return found[0]


def restarted(processes, process: Process, timeout: float, *, via_proxy: bool = False) -> Process:
    say(f"restarting {process.name}")
    new = processes.restart(process, timeout)
    if new.kind == "web":
        wait_for(lambda: is_ready(web_now(processes, new.name)), timeout, f"{new.name} to answer /readyz")
        new = web_now(processes, new.name)
        if via_proxy:
            proxy_admits(new.pid, timeout)
    say(f"  {new.name} runs again (pid {new.pid}{', ready' if new.kind == 'web' else ''})")
    return new


def command_rolling_restart(args) -> int:
    """Web processes one at a time — each back behind the proxy before the
    next stops — then the workers one at a time, then beat."""
    processes = supervisor(args.supervisor)
    order = {"web": 0, "worker": 1, "beat": 2}
    for process in sorted(processes.processes(), key=lambda p: order.get(p.kind, 3)):
        if process.kind in order:
            restarted(processes, process, args.timeout, via_proxy=process.kind == "web")
    say("rolling restart done")
    return 0


def command_backup(args) -> int:
    database, backups = Database.of_deployment(), Backups(args.dir, args.keep)
    path = backups.take(database)
    say(f"backed up {database.name} to {path} ({path.stat().st_size / 2**20:.1f} MB)")
    database.job_ran("backup")
    for removed in backups.rotate(database):
        say(f"removed {removed} (keeping the newest {backups.keep})")
    if args.check:
        newest = backups.all(database)[0]
        say(f"checking {newest.name}: restored into a scratch database …")
        say(f"  {backups.check(database, newest)}; every migration applied")
        database.job_ran("backup_checked")
    return 0
