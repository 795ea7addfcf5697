"""studio.runtime.sql, the hot path's written-out statements, reads and writes
rows exactly as the ORM does: same values, same types, defaults applied."""

import uuid
from decimal import Decimal

import pytest
from django.db.models import F
from django.utils import timezone

from agents.models import Turn, TurnStatus
from billing.models import CostLine
from studio.runtime import sql

pytestmark = pytest.mark.django_db


def _line(game, **fields) -> CostLine:
    fields = {"game_id": game.pk, "agent_name": "dm", "kind": "model", "label": "Model", **fields}
    return CostLine(quantity=12, amount=Decimal("0.000340"), detail={"calls": 1, "model": "m"}, **fields)


def test_a_row_read_is_the_row_the_orm_reads(game):
    line = CostLine.objects.create(**{k: v for k, v in vars(_line(game)).items() if not k.startswith("_")})

    read = sql.first(CostLine, {"pk": line.pk, "kind__in": ["model", "compaction"], "turn_id": None})

    orm = CostLine.objects.get(pk=line.pk)
    assert {f.attname: getattr(read, f.attname) for f in CostLine._meta.concrete_fields} == {
        f.attname: getattr(orm, f.attname) for f in CostLine._meta.concrete_fields
    }
    assert read.detail == {"calls": 1, "model": "m"} and read.created_at.tzinfo is not None
    assert sql.first(CostLine, {"pk": line.pk, "kind": "compaction"}) is None


def test_insert_sets_ids_and_stamps_and_update_counts_what_matched(game):
    first, second = _line(game), _line(game, kind="memory_access", label="Memory access")

    sql.insert(first, second)

    assert CostLine.objects.filter(pk__in=[first.pk, second.pk]).count() == 2
    assert CostLine.objects.get(pk=second.pk).kind == "memory_access"
    assert first.created_at is not None and not first._state.adding
    assert (
        sql.update(CostLine, {"game": game.pk, "kind": "model"}, {"quantity": 40, "detail": {"calls": 2}})
        == 1
    )
    assert CostLine.objects.get(pk=first.pk).detail == {"calls": 2}


def _row(model, pk) -> dict:
    return {
        f.attname: v
        for f, v in zip(
            model._meta.concrete_fields, model.objects.filter(pk=pk).values_list()[0], strict=True
        )
        if f is not model._meta.pk
    }


def test_insert_prepares_each_value_as_save_does_whatever_its_type(agent):
    """Every value — a choice, a bool given to a number, a None, JSON, a
    Decimal, a UUID, stamps — goes in as `save` prepares it: the row is the
    one the ORM would have written."""
    values = {
        "agent": agent,
        "status": TurnStatus.RUNNING,
        "is_transient": False,
        "block_number": 7,
        "reply": "",
        "error": "it's odd",
        "error_code": "",
        "followers": True,
        "compaction_wait_ms": 0,
        "open_call_tokens": 12,
        "run_state": {"step": 2, "text": None},
        "held": Decimal("0.000125"),
        "lease_until": timezone.now(),
        "started_at": None,
    }
    ours = Turn(**values)
    sql.insert(ours)
    saved = Turn.objects.create(**{**values, "uuid": uuid.uuid4()})

    mine, theirs = _row(Turn, ours.pk), _row(Turn, saved.pk)
    assert mine["followers"] == 1 and mine["run_state"] == {"step": 2, "text": None}
    assert mine["created_at"] is not None
    assert {k: v for k, v in mine.items() if k not in ("uuid", "created_at")} == {
        k: v for k, v in theirs.items() if k not in ("uuid", "created_at")
    }


def test_only_equality_and_in_are_understood():
    with pytest.raises(ValueError):
        sql.first(CostLine, {"quantity__gt": 1})


def _lines_of(game_id, kind):
    return CostLine.objects.filter(game=game_id, kind=kind).annotate(cents=F("amount") * 100).order_by("pk")


def test_a_compiled_read_binds_new_values_and_reads_as_the_orm_does(game, other_game):
    mine = CostLine.objects.create(**{k: v for k, v in vars(_line(game)).items() if not k.startswith("_")})
    compiled = sql.Compiled(_lines_of, game_id=-7, kind="\x00kind")

    read = compiled.all(game_id=game.pk, kind="model")

    orm = _lines_of(game.pk, "model").get()
    assert [(line.pk, line.amount, line.detail, line.created_at, line.cents) for line in read] == [
        (mine.pk, orm.amount, orm.detail, orm.created_at, orm.cents)
    ]
    assert compiled.first(game_id=other_game.pk, kind="model") is None
    assert compiled.first(game_id=game.pk, kind="compaction") is None


def test_a_stand_in_the_statement_does_not_carry_as_it_is_is_refused():
    changed = sql.Compiled(lambda label: CostLine.objects.filter(label__contains=label), label="\x00label")
    with pytest.raises(ValueError):
        changed.first(label="Model")
