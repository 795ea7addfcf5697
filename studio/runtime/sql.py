"""Plain statements for the few reads and writes every request or send runs.

Building a statement through the ORM costs this process 200–600 µs of CPU
(a `select_related(...).first()` about 600 µs, a `filter(...).update()`
about 200 µs); the same statement written out and run costs 40–90 µs,
instances included (docs/performance.md lists where they are used). The
hot path uses these; everything else keeps the ORM. Rows come back as model
instances (`Model.from_db`), values go in through each field's own
preparation, so callers see no difference. `run` and `one` take a
statement written with `%s` placeholders, as a cursor does, and on
PostgreSQL skip the cursor too (`run`'s docstring says when).

`where` is a dict of column conditions: `{"name": x}` is equality (None:
IS NULL), `{"status__in": [...]}` membership. Nothing else is understood.
"""

# Speed: 0.2–0.6 ms of ORM CPU per hot statement; guarded by bench/agent_server.py (server CPU per message).
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import AutoField, BigAutoField
from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.postgres import types


class Ran(NamedTuple):
    """A statement's rows (none for a write without RETURNING) and how many
    rows it read or wrote."""

    rows: list
    count: int


def run(statement: str, params: Sequence = ()) -> Ran:
    """Run one statement written with `%s` placeholders, as a cursor would.

    On PostgreSQL, once the connection is open, it goes straight to libpq
    on Django's own connection (inside the caller's transaction), its
    parameters bound on the server: psycopg's cursor and Django's around it
    cost ~80 µs of this process's CPU a statement, several times libpq's
    own. Anywhere else — SQLite, a connection not open yet, queries being
    logged or wrapped (the tests that count statements) — it takes
    Django's cursor.

    Parameters are bound on the server, typed by their value (a small int
    is a smallint): let each meet a column or a cast, not only another
    parameter (`%s * %s` of two small ints can overflow where Django's
    cursor, which writes them in as literals, would not, and `%s IS NULL`
    of a None has no type at all)."""
    # Speed: Django's and psycopg's cursors per hot statement; guarded by bench/agent_server.py (server CPU per message).
    return _run(_db(), statement, params)


def _run(db, statement: str, params: Sequence) -> Ran:
    wire = _wire_ready(db)
    if wire is None:
        with db.cursor() as cursor:
            cursor.execute(statement, params)
            rows = cursor.fetchall() if cursor.description is not None else []
            return Ran(rows, cursor.rowcount)
    return _wire_run(db, *wire, statement, params)


def one(statement: str, params: Sequence = ()):
    """The first row `statement` returns, or None."""
    rows = run(statement, params).rows
    return rows[0] if rows else None


def _db():
    """The default database's connection itself: `django.db.connection` is
    a proxy that looks it up again on every attribute read."""
    return connections[DEFAULT_DB_ALIAS]


def _field(model, name: str):
    return model._meta.pk if name == "pk" else model._meta.get_field(name)


def _where(db, model, where: dict) -> tuple[str, list]:
    parts, params = [], []
    for key, value in where.items():
        name, _, lookup = key.partition("__")
        column = db.ops.quote_name(_field(model, name).column)
        if lookup == "in":
            parts.append(f"{column} IN ({', '.join(['%s'] * len(value))})")
            params.extend(value)
        elif lookup:
            raise ValueError(f"studio.runtime.sql understands equality and __in, not __{lookup}")
        elif value is None:
            parts.append(f"{column} IS NULL")
        else:
            parts.append(f"{column} = %s")
            params.append(_field(model, name).get_db_prep_value(value, db))
    return " AND ".join(parts), params


def columns(model, alias: str) -> str:
    """The model's columns, as `alias`.`column`, in field order."""
    quote = _db().ops.quote_name
    return ", ".join(f"{alias}.{quote(f.column)}" for f in model._meta.concrete_fields)


def instance(model, values):
    """A model instance from `values`, the row's `columns(model, …)` in
    order, each read as the ORM reads it (the backend's and the field's
    converters: SQLite's dates, JSON text)."""
    db, read = _db(), []
    for value, (column, converters) in zip(values, _converters(db, model), strict=True):
        for converter in converters:
            value = converter(value, column, db)
        read.append(value)
    return model.from_db(db.alias, [f.attname for f in model._meta.concrete_fields], read)


_CONVERTERS: dict = {}


def _converters(db, model) -> list:
    """Each column's converters, built once per model and database kind
    (they depend on the backend, not on which thread's connection asks)."""
    key = (db.vendor, model)
    out = _CONVERTERS.get(key)
    if out is None:
        out = _CONVERTERS[key] = [
            (column, db.ops.get_db_converters(column) + field.get_db_converters(db))
            for field in model._meta.concrete_fields
            for column in [field.get_col(model._meta.db_table)]
        ]
    return out


def first(model, where: dict):
    """The row of `model` that matches `where` with the lowest id, or None."""
    db = _db()
    condition, params = _where(db, model, where)
    table = db.ops.quote_name(model._meta.db_table)
    pk = db.ops.quote_name(model._meta.pk.column)
    rows = _run(
        db, f"SELECT {columns(model, 't')} FROM {table} t WHERE {condition} ORDER BY t.{pk} LIMIT 1", params
    ).rows
    return instance(model, rows[0]) if rows else None


def update(model, where: dict, values: dict, *, deleting: tuple | None = None) -> int:
    """Set `values` on the rows that match `where`; how many matched.
    `deleting`: (another model, its `where`) whose rows are deleted with it
    — in the same statement on PostgreSQL, in one more elsewhere."""
    db = _db()
    quote = db.ops.quote_name
    sets, params = [], []
    for name, value in values.items():
        field = _field(model, name)
        sets.append(f"{quote(field.column)} = %s")
        params.append(field.get_db_prep_save(value, db))
    condition, where_params = _where(db, model, where)
    statement = f"UPDATE {quote(model._meta.db_table)} SET {', '.join(sets)} WHERE {condition}"
    params += where_params
    if deleting is not None:
        other, other_where = deleting
        other_condition, other_params = _where(db, other, other_where)
        delete = f"DELETE FROM {quote(other._meta.db_table)} WHERE {other_condition}"
        if db.vendor == "postgresql":
            statement, params = f"WITH deleted AS ({delete}) {statement}", other_params + params
        else:
            _run(db, delete, other_params)
    return _run(db, statement, params).count


def insert(*objs) -> None:
    """Insert `objs` (of one model, not saved yet) in one statement, as
    `save` would (defaults, `auto_now` stamps), setting their ids."""
    db, model = _db(), type(objs[0])
    quote = db.ops.quote_name
    pk = model._meta.pk
    fields = [
        f for f in model._meta.concrete_fields if not (f is pk and isinstance(f, AutoField | BigAutoField))
    ]
    rows, params = [], []
    for obj in objs:
        rows.append(f"({', '.join(['%s'] * len(fields))})")
        params.extend(f.get_db_prep_save(f.pre_save(obj, True), db) for f in fields)
    names = ", ".join(quote(f.column) for f in fields)
    ran = _run(
        db,
        f"INSERT INTO {quote(model._meta.db_table)} ({names}) VALUES {', '.join(rows)} RETURNING {quote(pk.column)}",
        params,
    )
    ids = [row[0] for row in ran.rows]
    for obj, id_ in zip(objs, ids, strict=True):
        setattr(obj, pk.attname, id_)
        obj._state.adding, obj._state.db = False, db.alias


class Compiled:
    """A read too involved to write out by hand, on a path too hot to build
    through the ORM each time: `build(**slots)` makes its queryset (of one
    model, with annotations), which is compiled once per kind of database
    with a stand-in value for each slot; each run binds the slots' values
    where their stand-ins were and reads the rows as the ORM would (each
    column's converters), as instances with their annotations set.

    A stand-in must reach the statement's parameters as it is (an equality,
    say, not a `__contains`, which wraps it), or it is refused."""

    def __init__(self, build, **stand_ins):
        self._build, self._stand_ins = build, stand_ins
        self._by_vendor: dict = {}

    def all(self, **values) -> list:
        db = _db()
        statement, params, slots, converters, annotations = self._compiled(db)
        params = list(params)
        for name, positions in slots.items():
            for position in positions:
                params[position] = values[name]
        model = self._model
        names = [f.attname for f in model._meta.concrete_fields]
        found = []
        for row in _run(db, statement, params).rows:
            row = list(row)
            for index, (functions, expression) in converters:
                for convert in functions:
                    row[index] = convert(row[index], expression, db)
            obj = model.from_db(db.alias, names, row[: len(names)])
            for name, index in annotations:
                setattr(obj, name, row[index])
            found.append(obj)
        return found

    def first(self, **values):
        rows = self.all(**values)
        return rows[0] if rows else None

    def _compiled(self, db):
        compiled = self._by_vendor.get(db.vendor)
        if compiled is None:
            queryset = self._build(**self._stand_ins)
            self._model = queryset.model
            compiler = queryset.query.get_compiler(connection=db)
            statement, params = compiler.as_sql()
            slots = {
                name: [i for i, param in enumerate(params) if param == stand_in]
                for name, stand_in in self._stand_ins.items()
            }
            if not all(slots.values()) or compiler.klass_info["select_fields"] != list(
                range(len(self._model._meta.concrete_fields))
            ):
                raise ValueError(
                    "a stand-in is not a parameter of its own, or the model's columns are not first"
                )
            converters = list(compiler.get_converters([column for column, _, _ in compiler.select]).items())
            annotations = list(compiler.annotation_col_map.items())
            compiled = self._by_vendor[db.vendor] = (statement, tuple(params), slots, converters, annotations)
        return compiled


# --- straight to libpq ------------------------------------------------------------


def _wire_ready(db):
    """Django's open psycopg connection and its kept transformer, when a
    statement may bypass its cursor: nothing logs or wraps queries, the
    request's health check is done, the time zone is the one the
    connection reads timestamps in (a cursor would set another: settings
    changed since it opened), and the transaction is not one Django already
    knows is broken."""
    if db.vendor != "postgresql" or db.execute_wrappers or db.queries_logged:
        return None
    raw = db.connection
    if raw is None or raw.closed or raw._pipeline is not None:
        return None
    if db.health_check_enabled and not db.health_check_done:
        return None
    tx, zone = _kept(raw)
    if zone != db.timezone:
        return None
    db.validate_no_broken_transaction()
    return raw, tx


def _wire_run(db, raw, tx, statement: str, params: Sequence) -> Ran:
    query, count = _numbered(statement)
    if count != len(params):
        raise TypeError(f"the statement has {count} placeholders, not {len(params)}")
    pgconn = raw.pgconn
    with db.wrap_database_errors:
        if not raw.autocommit and pgconn.transaction_status == pq.TransactionStatus.IDLE:
            # What psycopg's cursor would have sent first.
            _checked(raw, pgconn.exec_(raw._get_tx_start_command()))
        if count:
            values = tx.dump_sequence(params, [PyFormat.AUTO] * count)
            result = pgconn.exec_params(query, values, tx.types, tx.formats)
        else:
            result = pgconn.exec_params(query, None)
        _checked(raw, result)
        if result.status == pq.ExecStatus.TUPLES_OK:
            tx.set_pgresult(result)
            rows = tx.load_rows(0, result.ntuples, tuple)
            tx.set_pgresult(None)  # the kept transformer keeps no result alive
            return Ran(rows, result.ntuples)
        touched = result.command_tuples
        return Ran([], -1 if touched is None else touched)


def _checked(raw, result) -> None:
    if result.status in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
        return
    if result.error_field(pq.DiagnosticField.SQLSTATE) is None:
        # Not the server's answer but libpq's: the connection is gone. psycopg's
        # cursor says so as OperationalError, which the studio waits out (503).
        raise errors.OperationalError(result.error_message.decode(errors="replace").strip())
    raise errors.error_from_result(result, encoding=raw.info.encoding)


def _kept(raw) -> tuple:
    """One psycopg transformer per connection, so its per-type dumpers and
    loaders are looked up once, not once per statement; and the time zone
    the connection's timestamps are read in."""
    kept = getattr(raw, "_studio_kept", None)
    if kept is None:
        loader = raw.adapters.get_loader(types["timestamptz"].oid, pq.Format.TEXT)
        kept = raw._studio_kept = (Transformer(raw), getattr(loader, "timezone", None))
    return kept


_PLACEHOLDER = re.compile(r"%%|%s|%")


@lru_cache(maxsize=256)
def _numbered(statement: str) -> tuple[bytes, int]:
    """`statement` with `$1`, `$2`, … for its `%s` (and `%` for `%%`), as
    bytes, and how many there are."""
    count = 0

    def number(match):
        nonlocal count
        if match.group() == "%%":
            return "%"
        if match.group() == "%":
            raise ValueError(f"a lone % in {statement!r}")
        count += 1
        return f"${count}"

    return _PLACEHOLDER.sub(number, statement).encode(), count
