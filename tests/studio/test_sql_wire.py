"""studio.runtime.sql.run on PostgreSQL: once Django's connection is open, a
hot statement skips Django's and psycopg's cursors and goes to libpq on the
same connection. What a caller gets back — values, types, errors, what a
rollback undoes — is what the cursor gives."""

import datetime
from decimal import Decimal
from unittest import mock

import psycopg
import pytest
from django.db import DataError, IntegrityError, InternalError, OperationalError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from billing.models import CostLine
from studio.runtime import sql

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the wire path is PostgreSQL's"),
]

EVERY_TYPE = (
    "SELECT %s::int, %s::bigint, %s::numeric(12,6), %s::date, %s::timestamptz, %s::jsonb,"
    " %s::text, %s::boolean, %s::int, 'a%%b', %s::uuid"
)
VALUES = (
    7,
    2**40,
    Decimal("0.000340"),
    datetime.date(2026, 12, 6),
    datetime.datetime(2026, 12, 6, 9, 30, tzinfo=datetime.UTC),
    '{"calls": 1}',
    "naïve ☃",
    True,
    None,
    "1d6c8b6e-4c4f-4f5a-9a43-2f1b0d9f7e01",
)


def _by_cursor(statement, params):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return [tuple(row) for row in cursor.fetchall()]


def _open():
    connection.ensure_connection()
    _by_cursor("SELECT 1", ())  # the request's health check, as a view's first query does


def _no_cursor():
    """Any use of Django's cursor fails the test: the statement must have
    gone the other way."""
    return mock.patch.object(connection, "cursor", side_effect=AssertionError("took Django's cursor"))


@pytest.fixture
def no_cursor():
    _open()
    with _no_cursor():
        yield


@pytest.fixture
def line(game):
    return CostLine.objects.create(
        game_id=game.pk, agent_name="dm", kind="model", label="Model", quantity=1, amount=Decimal("0")
    )


def test_every_type_reads_back_as_the_cursor_reads_it():
    _open()
    by_cursor = _by_cursor(EVERY_TYPE, VALUES)

    with _no_cursor():
        ran = sql.run(EVERY_TYPE, VALUES)

    assert ran.rows == by_cursor and ran.count == 1
    row = ran.rows[0]
    assert row[2] == Decimal("0.000340") and row[4].tzinfo is not None and row[8] is None
    assert row[9] == "a%b"


def test_a_write_counts_its_rows_and_returns_what_it_returns(line, no_cursor):
    table = CostLine._meta.db_table

    assert sql.run(f'UPDATE "{table}" SET quantity = quantity + %s WHERE id = %s', (4, line.pk)).count == 1
    assert sql.one(f'UPDATE "{table}" SET quantity = 9 WHERE id = %s RETURNING quantity', (line.pk,)) == (9,)
    assert sql.run(f'UPDATE "{table}" SET quantity = 1 WHERE id = %s', (-1,)) == sql.Ran([], 0)
    assert sql.one(f'SELECT quantity FROM "{table}" WHERE id = %s', (-1,)) is None


def test_a_broken_constraint_is_djangos_integrity_error_and_breaks_the_atomic_block(line):
    """(Savepoints are Django's cursor's; only the statements are watched.)"""
    _open()
    table = CostLine._meta.db_table
    unlabel = f'UPDATE "{table}" SET label = NULL WHERE id = %s'

    with transaction.atomic():
        with pytest.raises(IntegrityError), _no_cursor():
            sql.run(unlabel, (line.pk,))
        with pytest.raises(InternalError), _no_cursor():
            sql.run("SELECT 1")  # what the database says of an aborted transaction
        transaction.set_rollback(True)

    with transaction.atomic():
        with pytest.raises(IntegrityError), transaction.atomic(savepoint=False), _no_cursor():
            sql.run(unlabel, (line.pk,))
        with pytest.raises(TransactionManagementError), _no_cursor():
            sql.run("SELECT 1")  # what Django says of one it knows is broken

    with pytest.raises(DataError), transaction.atomic(), _no_cursor():
        sql.run("SELECT %s::int", ("not a number",))
    assert sql.one("SELECT label FROM billing_costline WHERE id = %s", (line.pk,)) == ("Model",)


@pytest.mark.django_db(transaction=True)
def test_the_first_statement_of_an_atomic_block_opens_the_transaction_a_rollback_undoes(line):
    """Outside the test's own transaction: the block must start with BEGIN,
    or its write would stand on its own and outlive the rollback."""
    _open()
    table = CostLine._meta.db_table

    with pytest.raises(RuntimeError), _no_cursor():
        with transaction.atomic():
            assert sql.one(f'UPDATE "{table}" SET quantity = 50 WHERE id = %s RETURNING id', (line.pk,))
            raise RuntimeError("the turn fails after the write")

    line.refresh_from_db()
    assert line.quantity == 1


def test_a_wrong_number_of_parameters_is_refused_before_it_reaches_the_database(no_cursor):
    with pytest.raises(TypeError):
        sql.run("SELECT %s, %s", (1,))


def test_counted_statements_still_go_through_djangos_cursor():
    """The tests that count a send's statements see every one of them."""
    _open()
    with CaptureQueriesContext(connection) as captured:
        assert sql.one("SELECT %s::int + 1", (1,)) == (2,)

    assert [query["sql"] for query in captured.captured_queries] == ["SELECT 1::int + 1"]


@pytest.mark.django_db(transaction=True)
def test_a_lost_connection_is_djangos_operational_error_as_on_the_cursor(no_cursor):
    """What the studio waits out as the database being down (a turn waits,
    an API request answers 503), not a bare DatabaseError."""
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"], user=settings["USER"], host=settings["HOST"], port=settings["PORT"]
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s, 10000)", (connection.connection.info.backend_pid,))

    try:
        with pytest.raises(OperationalError):
            sql.run("SELECT 1")
        assert connection.errors_occurred
    finally:
        connection.close_if_unusable_or_obsolete()  # what the request's end does


def test_after_the_time_zone_setting_changes_timestamps_read_as_the_cursor_reads_them(settings):
    """(Settings changed while the connection is open, as tests do: a
    cursor reads timestamps in the new zone.)"""
    _open()
    stamp = (datetime.datetime(2026, 1, 1, 12, tzinfo=datetime.UTC),)
    settings.USE_TZ = False

    expected = _by_cursor("SELECT %s::timestamptz", stamp)
    assert sql.run("SELECT %s::timestamptz", stamp).rows == expected
    assert expected[0][0].tzinfo is None
