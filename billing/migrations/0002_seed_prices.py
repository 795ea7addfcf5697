"""The starting price list: the offline `scripted` model, a fallback `*`
for any model without its own row, and the memory-access fee. Admins edit
these in the Django admin."""

from decimal import Decimal

from django.db import migrations

PRICES = [
    # model, input, output, cached input — credits per million tokens
    ("scripted", "2.000000", "8.000000", "0.500000"),
    ("*", "2.500000", "10.000000", "1.250000"),
]


def seed(apps, schema_editor):
    ModelPrice = apps.get_model("billing", "ModelPrice")
    Fee = apps.get_model("billing", "Fee")
    for model, inp, out, cached in PRICES:
        ModelPrice.objects.get_or_create(
            model=model,
            defaults={
                "input_per_mtok": Decimal(inp),
                "output_per_mtok": Decimal(out),
                "cached_input_per_mtok": Decimal(cached),
            },
        )
    Fee.objects.get_or_create(code="memory_access", defaults={"amount": Decimal("0.001000")})


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
