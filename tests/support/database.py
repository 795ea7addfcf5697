"""The test run's database, as the processes a test starts reach it."""

from django.db import connection


def database_url_of_this_test_run() -> str:
    """A DATABASE_URL for this test's database (pytest-django's test
    database, this worker's own under pytest-xdist)."""
    settings = connection.settings_dict
    if settings["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{settings['NAME']}"
    return f"postgres://{settings['USER'] or 'postgres'}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"


def database_sessions() -> int:
    """How many sessions PostgreSQL has open on this database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]
