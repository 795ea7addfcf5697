"""The starting price list: the offline `scripted` model, a fallback `*`
for any model without its own row, and the memory-access fee. Admins edit
these in the Django admin."""

from django.db import migrations

from billing.defaults import seed


def seed_prices(apps, schema_editor):
    seed(apps.get_model("billing", "ModelPrice"), apps.get_model("billing", "Fee"))


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]
    operations = [migrations.RunPython(seed_prices, migrations.RunPython.noop)]
