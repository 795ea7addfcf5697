"""The deployment's PostgreSQL database, and others on its server."""

from pathlib import Path
from urllib.parse import urlsplit

# --- PostgreSQL ---------------------------------------------------------------------------
from .base import NAME, Failed, run, say, setting


class Database:
    """The deployment's database (DATABASE_URL), and others on its server
    reached with the same credentials."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        if parts.scheme not in ("postgres", "postgresql", "pgsql"):
            raise Failed(f"DATABASE_URL must name a PostgreSQL database for this command, not {url!r}.")
        self.url, self.name = url, parts.path.lstrip("/")
        if not NAME.fullmatch(self.name):
            raise Failed(f"the database's name {self.name!r} must be letters, digits and _ (at most 63).")

    @classmethod
    def of_deployment(cls) -> "Database":
        return cls(setting("DATABASE_URL"))

    def url_of(self, name: str) -> str:
        """The URL of database `name` on the same server, as the same role."""
        if not NAME.fullmatch(name):
            raise Failed(f"{name!r} is too long or not a plain name for a database (at most 63 characters).")
        parts = urlsplit(self.url)
        query = f"?{parts.query}" if parts.query else ""
        # Written out: urlunsplit drops the // of a URL without a host (postgres:///studio, the local socket).
        return f"postgresql://{parts.netloc}/{name}{query}"

    def sql(self, statement: str, *, on: str | None = None) -> str:
        """`statement` on this database (or on database `on`); its rows, a line each."""
        url = self.url_of(on) if on else self.url_of(self.name)
        return run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", statement])

    def admin(self, statement: str) -> str:
        """A statement about databases, from the server's `postgres` database."""
        return self.sql(statement, on="postgres")

    def exists(self, name: str) -> bool:
        return self.admin(f"SELECT 1 FROM pg_database WHERE datname = '{name}'") == "1"

    def create(self, name: str) -> None:
        self.url_of(name)  # checks the name
        self.admin(f'CREATE DATABASE "{name}"')

    def drop(self, name: str) -> None:
        self.url_of(name)
        self.admin(f'DROP DATABASE IF EXISTS "{name}"')

    def rename(self, old: str, new: str) -> None:
        self.url_of(new)
        self.admin(f'ALTER DATABASE "{old}" RENAME TO "{new}"')

    def size(self) -> int:
        return int(self.sql("SELECT pg_database_size(current_database())"))

    def may_create_databases(self) -> bool:
        return self.sql("SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user") == "t"

    def dump(self, path: Path) -> None:
        run(["pg_dump", "--format=custom", "--file", str(path), "--dbname", self.url_of(self.name)])

    def restore_into(self, dump: Path, name: str) -> None:
        """`dump` restored into database `name`, new and empty: never over a
        schema (a `--clean` restore over an upgraded one fails on the tables
        the upgrade added that point at the old ones, and leaves a mix)."""
        run(["pg_restore", "--no-owner", "--exit-on-error", "--dbname", self.url_of(name), str(dump)])

    def sessions_on(self, name: str) -> str:
        return self.admin(
            f"SELECT string_agg(format('%s (pid %s, %s)', usename, pid, coalesce(application_name, '')), ', ') "
            f"FROM pg_stat_activity WHERE datname = '{name}'"
        )

    def job_ran(self, job: str) -> None:
        """Record a dead man's switch (studio/ops/jobs.py): the studio's JobRun row."""
        try:
            self.sql(
                f"INSERT INTO studio_jobrun (job, last_at) VALUES ('{job}', now()) "
                "ON CONFLICT (job) DO UPDATE SET last_at = excluded.last_at"
            )
        except Failed as error:
            say(f"warning: could not record that {job} ran: {error}")

    def jobs_age(self) -> dict[str, float]:
        """Each periodic job's seconds since it last ran (none before this release)."""
        try:
            rows = self.sql("SELECT job, extract(epoch FROM now() - last_at) FROM studio_jobrun ORDER BY job")
        except Failed:
            return {}
        return {job: float(age) for job, age in (line.split("|") for line in rows.splitlines() if line)}
