"""Each worker's test database on PostgreSQL, cloned from one migrated once.

Django makes a test database by creating it empty and running every
migration: ~6 s of CPU and ~14 s in all here, in each of a run's workers at
once. Here the migrations run once, into a template database named by a
digest of what they make (the migration files, the seeded price list they
read, Django's version), kept for the runs after; each worker's database is
a copy of it (CREATE DATABASE … TEMPLATE, under a lock, which builds the
template first when it is missing). A template of older migrations is
dropped when a new one is built. A run that keeps its database
(--reuse-db) or serializes it is left to Django."""

import hashlib
from contextlib import suppress

import django
from django.conf import settings
from django.db import DatabaseError

from tests.support.sources import ROOT

# What the migrations make depends on: the price list a data migration seeds.
MIGRATION_INPUTS = ["billing/defaults.py"]
# Held while a template is built or cloned (pg_advisory_lock's key).
LOCK = 0x57D10_7E57
TEMPLATE_PREFIX = "test_tpl_"


def digest() -> str:
    files = sorted(ROOT.glob("*/migrations/*.py")) + [ROOT / name for name in MIGRATION_INPUTS]
    hashed = hashlib.sha256(django.get_version().encode())
    for path in files:
        hashed.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return hashed.hexdigest()[:16]


def install() -> None:
    """Make PostgreSQL's test databases copies of the template."""
    from django.db.backends.postgresql.creation import DatabaseCreation

    create = DatabaseCreation.create_test_db

    def create_test_db(self, verbosity=1, autoclobber=False, serialize=True, keepdb=False):
        if keepdb or serialize:
            return create(self, verbosity, autoclobber, serialize, keepdb)
        name = self._get_test_db_name()
        quote = self.connection.ops.quote_name
        with self._nodb_cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK])
            try:
                template = _template(self, cursor, create)
                cursor.execute(f"DROP DATABASE IF EXISTS {quote(name)}")
                cursor.execute(f"CREATE DATABASE {quote(name)} WITH TEMPLATE {quote(template)}")
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK])
        self.connection.close()
        settings.DATABASES[self.connection.alias]["NAME"] = name
        self.connection.settings_dict["NAME"] = name
        self.connection.ensure_connection()
        return name

    DatabaseCreation.create_test_db = create_test_db


def _template(creation, cursor, create) -> str:
    """The template's name, built first (by Django's own way of making a
    test database) when there is none for these migrations."""
    template = TEMPLATE_PREFIX + digest()
    cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template])
    if cursor.fetchone() is not None:
        return template
    quote = creation.connection.ops.quote_name
    building = template + "_building"
    test_settings = creation.connection.settings_dict["TEST"]
    kept_name, kept_test_name = creation.connection.settings_dict["NAME"], test_settings.get("NAME")
    test_settings["NAME"] = building
    try:
        create(creation, verbosity=0, autoclobber=True, serialize=False, keepdb=False)
    finally:
        creation.connection.close()
        test_settings["NAME"] = kept_test_name
        creation.connection.settings_dict["NAME"] = kept_name
        settings.DATABASES[creation.connection.alias]["NAME"] = kept_name
    cursor.execute(f"ALTER DATABASE {quote(building)} RENAME TO {quote(template)}")
    cursor.execute(
        "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
        [TEMPLATE_PREFIX + "%", template],
    )
    for (older,) in cursor.fetchall():
        with suppress(DatabaseError):  # another run is copying it: the next build drops it
            cursor.execute(f"DROP DATABASE IF EXISTS {quote(older)}")
    return template
