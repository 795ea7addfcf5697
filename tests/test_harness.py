"""What every test starts on: the database as migrate left it, whatever ran
before it in the same process (a transactional test ends with a flush);
and where what tests share is kept: tests/support/."""

from pathlib import Path

import pytest
from django.core.management import call_command

from billing.defaults import FEES, MODEL_PRICES
from billing.models import Fee, ModelPrice


@pytest.mark.django_db(transaction=True)
def test_the_flush_after_a_transactional_test_puts_the_seeded_prices_and_fees_back():
    ModelPrice.objects.filter(model="scripted").update(input_per_mtok=99)
    ModelPrice.objects.create(model="openai:gpt-x", input_per_mtok=1, output_per_mtok=1)
    Fee.objects.all().delete()

    # What pytest-django runs after each transactional test.
    call_command("flush", interactive=False, verbosity=0)

    prices = ModelPrice.objects.values_list("model", "input_per_mtok", "output_per_mtok")
    assert sorted((m, str(i), str(o)) for m, i, o in prices) == sorted(
        (model, inp, out) for model, inp, out, _ in MODEL_PRICES
    )
    assert [(code, str(amount)) for code, amount in Fee.objects.values_list("code", "amount")] == FEES


def test_what_tests_share_is_in_tests_support_not_beside_the_tests():
    """A test folder holds its tests, its conftests and its package file;
    a module two tests import is a helper, kept in tests/support/."""
    tests = Path(__file__).resolve().parent
    helpers = [
        path.relative_to(tests).as_posix()
        for path in tests.glob("*/**/*.py")
        if path.parts[len(tests.parts)] != "support"
        and not path.name.startswith("test_")
        and path.name not in ("conftest.py", "__init__.py")
    ]

    assert helpers == []
