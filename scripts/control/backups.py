"""Backups: dumps in one directory, rotated, and checked by a restore."""

import json
import os
import time
from pathlib import Path

# --- backups ------------------------------------------------------------------------------
from .base import BACKUP_STEM, STATE_FILE, Failed, manage, owner, setting, stamp
from .database import Database


class Backups:
    """Dumps of the database in one directory, `<database>-<UTC time>[-label].dump`,
    the newest `keep` of them kept; the one an upgrade may roll back to is
    never removed while its upgrade stands."""

    def __init__(self, directory: str | None = None, keep: int | None = None):
        self.dir = Path(directory or setting("STUDIO_BACKUP_DIR", "/var/backups/studio"))
        self.keep = keep if keep is not None else int(setting("STUDIO_BACKUP_KEEP", "14"))
        if self.keep < 1:
            raise Failed("keep at least one backup (STUDIO_BACKUP_KEEP, --keep).")

    def ensure_dir(self) -> None:
        if not self.dir.is_dir():
            self.dir.mkdir(parents=True, mode=0o700)
            if os.geteuid() == 0:
                os.chown(self.dir, owner().pw_uid, owner().pw_gid)

    def all(self, database: Database) -> list[Path]:
        """This database's dumps, newest first."""
        found = [p for p in self.dir.glob(f"{database.name}-*.dump") if BACKUP_STEM.fullmatch(p.name)]
        return sorted(found, key=lambda p: p.name.removeprefix(f"{database.name}-"), reverse=True)

    def take(self, database: Database, label: str = "") -> Path:
        """A dump of the database while the studio runs (consistent: one
        snapshot), written whole before it takes its name."""
        self.ensure_dir()
        name = f"{database.name}-{stamp()}{'-' + label if label else ''}.dump"
        while (self.dir / name).exists():  # one a second at most: the name has the time
            time.sleep(0.5)
            name = f"{database.name}-{stamp()}{'-' + label if label else ''}.dump"
        partial = self.dir / f".{name}.partial"
        database.dump(partial)
        partial.rename(self.dir / name)
        return self.dir / name

    def rotate(self, database: Database) -> list[Path]:
        """Remove all but the newest `keep` dumps (and the upgrade's); the removed."""
        protected = {state_read(self).get("backup")} if self.state_path().exists() else set()
        removed = [p for p in self.all(database)[self.keep :] if str(p) not in protected]
        for path in removed:
            path.unlink()
        return removed

    def check(self, database: Database, dump: Path) -> str:
        """Restore `dump` into a scratch database and run the checks the
        studio has on it: the ledger, and whether its code's migrations
        are all applied. The scratch database is dropped after."""
        scratch = f"{database.name}_check_{stamp()[2:-1].replace('T', '')}"
        database.create(scratch)
        try:
            database.restore_into(dump, scratch)
            ledger = manage("checkledger", database_url=database.url_of(scratch))
            manage("migrate", "--check", database_url=database.url_of(scratch))
        finally:
            database.drop(scratch)
        return ledger_said(ledger)

    def state_path(self) -> Path:
        return self.dir / STATE_FILE


def ledger_said(output: str) -> str:
    games = sum(1 for line in output.splitlines() if line.startswith("ok "))
    return (
        f"checkledger: every game's balance matches its ledger ({games} {'game' if games == 1 else 'games'})"
    )


def state_read(backups: Backups) -> dict:
    return json.loads(backups.state_path().read_text())
