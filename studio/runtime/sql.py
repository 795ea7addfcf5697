"""Plain statements for the few reads and writes every request or send runs.

Building a statement through the ORM costs this process 200–600 µs of CPU
(a `select_related(...).first()` about 600 µs, a `filter(...).update()`
about 200 µs); the same statement written out and run costs 40–90 µs,
instances included (docs/performance.md lists where they are used). The
hot path uses these; everything else keeps the ORM. Rows come back as model
instances (`Model.from_db`), values go in through each field's own
preparation, so callers see no difference.

`where` is a dict of column conditions: `{"name": x}` is equality (None:
IS NULL), `{"status__in": [...]}` membership. Nothing else is understood.
"""

# Speed: 0.2–0.6 ms of ORM CPU per hot statement; guarded by bench/agent_server.py (server CPU per message).
from functools import cache

from django.db import connection
from django.db.models import AutoField, BigAutoField


def _field(model, name: str):
    return model._meta.pk if name == "pk" else model._meta.get_field(name)


def _where(model, where: dict) -> tuple[str, list]:
    parts, params = [], []
    for key, value in where.items():
        name, _, lookup = key.partition("__")
        column = connection.ops.quote_name(_field(model, name).column)
        if lookup == "in":
            parts.append(f"{column} IN ({', '.join(['%s'] * len(value))})")
            params.extend(value)
        elif lookup:
            raise ValueError(f"studio.runtime.sql understands equality and __in, not __{lookup}")
        elif value is None:
            parts.append(f"{column} IS NULL")
        else:
            parts.append(f"{column} = %s")
            params.append(_field(model, name).get_db_prep_value(value, connection))
    return " AND ".join(parts), params


def columns(model, alias: str) -> str:
    """The model's columns, as `alias`.`column`, in field order."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(f.column)}" for f in model._meta.concrete_fields)


def instance(model, values):
    """A model instance from `values`, the row's `columns(model, …)` in
    order, each read as the ORM reads it (the backend's and the field's
    converters: SQLite's dates, JSON text)."""
    read = []
    for value, (column, converters) in zip(values, _converters(model, connection.vendor), strict=True):
        for converter in converters:
            value = converter(value, column, connection)
        read.append(value)
    return model.from_db(connection.alias, [f.attname for f in model._meta.concrete_fields], read)


@cache
def _converters(model, vendor: str) -> list:
    out = []
    for field in model._meta.concrete_fields:
        column = field.get_col(model._meta.db_table)
        out.append((column, connection.ops.get_db_converters(column) + field.get_db_converters(connection)))
    return out


def first(model, where: dict):
    """The row of `model` that matches `where` with the lowest id, or None."""
    condition, params = _where(model, where)
    table = connection.ops.quote_name(model._meta.db_table)
    pk = connection.ops.quote_name(model._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns(model, 't')} FROM {table} t WHERE {condition} ORDER BY t.{pk} LIMIT 1", params
        )
        row = cursor.fetchone()
    return None if row is None else instance(model, row)


def update(model, where: dict, values: dict, *, deleting: tuple | None = None) -> int:
    """Set `values` on the rows that match `where`; how many matched.
    `deleting`: (another model, its `where`) whose rows are deleted with it
    — in the same statement on PostgreSQL, in one more elsewhere."""
    quote = connection.ops.quote_name
    sets, params = [], []
    for name, value in values.items():
        field = _field(model, name)
        sets.append(f"{quote(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    condition, where_params = _where(model, where)
    statement = f"UPDATE {quote(model._meta.db_table)} SET {', '.join(sets)} WHERE {condition}"
    params += where_params
    with connection.cursor() as cursor:
        if deleting is not None:
            other, other_where = deleting
            other_condition, other_params = _where(other, other_where)
            delete = f"DELETE FROM {quote(other._meta.db_table)} WHERE {other_condition}"
            if connection.vendor == "postgresql":
                statement, params = f"WITH deleted AS ({delete}) {statement}", other_params + params
            else:
                cursor.execute(delete, other_params)
        cursor.execute(statement, params)
        return cursor.rowcount


def insert(*objs) -> None:
    """Insert `objs` (of one model, not saved yet) in one statement, as
    `save` would (defaults, `auto_now` stamps), setting their ids."""
    model, quote = type(objs[0]), connection.ops.quote_name
    pk = model._meta.pk
    fields = [
        f for f in model._meta.concrete_fields if not (f is pk and isinstance(f, AutoField | BigAutoField))
    ]
    rows, params = [], []
    for obj in objs:
        rows.append(f"({', '.join(['%s'] * len(fields))})")
        params.extend(f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields)
    names = ", ".join(quote(f.column) for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(model._meta.db_table)} ({names}) VALUES {', '.join(rows)} "
            f"RETURNING {quote(pk.column)}",
            params,
        )
        ids = [row[0] for row in cursor.fetchall()]
    for obj, id_ in zip(objs, ids, strict=True):
        setattr(obj, pk.attname, id_)
        obj._state.adding, obj._state.db = False, connection.alias
