"""`manage.py setprice MODEL INPUT OUTPUT [CACHED]`: a model's price, in
credits per million tokens, set from a script (no admin needed), the row
printed."""

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from billing import ledger
from billing.models import ModelPrice


def run(*args) -> str:
    """Run setprice; returns the last line of its stdout."""
    out = StringIO()
    call_command("setprice", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip().splitlines()[-1]


def price_of(model: str) -> tuple[Decimal, Decimal, Decimal]:
    row = ModelPrice.objects.get(model=model)
    return row.input_per_mtok, row.output_per_mtok, row.cached_input_per_mtok


def test_it_adds_a_models_price_and_prints_the_row(db):
    last_line = run("openai:gpt-4o-mini", "0.15", "0.6", "0.075")

    assert price_of("openai:gpt-4o-mini") == (Decimal("0.15"), Decimal("0.6"), Decimal("0.075"))
    assert last_line.split() == [
        "openai:gpt-4o-mini",
        "input",
        "0.150000",
        "output",
        "0.600000",
        "cached",
        "0.075000",
    ]
    assert ledger.model_has_price("openai:gpt-4o-mini")


def test_a_priced_model_can_then_be_defined(api):
    refused = api.put("/api/v1/agents/npc", {"model": "openai:llama3.1"}, format="json")
    run("openai:llama3.1", "1", "2")

    defined = api.put("/api/v1/agents/npc", {"model": "openai:llama3.1"}, format="json")

    assert refused.status_code == 400
    assert defined.status_code in (200, 201), defined.content


def test_without_cached_a_new_row_charges_cached_input_as_input(db):
    run("anthropic:claude-x", "3", "15")

    assert price_of("anthropic:claude-x") == (Decimal(3), Decimal(15), Decimal(3))


def test_it_changes_an_existing_price_keeping_its_cached_price_unless_given(db):
    run("openai:gpt-4o", "2.5", "10", "1.25")

    run("openai:gpt-4o", "2", "8")
    assert price_of("openai:gpt-4o") == (Decimal(2), Decimal(8), Decimal("1.25"))
    run("openai:gpt-4o", "2", "8", "0.5")
    assert price_of("openai:gpt-4o") == (Decimal(2), Decimal(8), Decimal("0.5"))
    assert ModelPrice.objects.filter(model="openai:gpt-4o").count() == 1


def test_it_sets_the_catch_all_price(db):
    run("*", "4", "16", "2")

    assert price_of("*") == (Decimal(4), Decimal(16), Decimal(2))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("openai:gpt-4o", "-1", "2"), "INPUT"),
        (("openai:gpt-4o", "1", "lots"), "OUTPUT"),
        (("openai:gpt-4o", "1", "2", "0.0000001"), "six decimal places"),
        (("gpt-4o", "1", "2"), "openai:<model>"),
        (("openai:", "1", "2"), "openai:<model>"),
    ],
)
def test_it_refuses_a_price_or_a_name_no_agent_could_use(db, args, says):
    with pytest.raises(CommandError, match=says):
        run(*args)

    assert not ModelPrice.objects.filter(model=args[0]).exists()
