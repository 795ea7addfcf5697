"""Each agent's memories' bytes together, kept on its row (the store cap's
check reads it rather than summing the store at every write): the column,
then its value for the agents there are, a few hundred at a time (each its
own transaction, so a large table is never locked whole). An upgrade stops
the studio while it migrates (docs/operating.md), so no write goes uncounted;
had one, `manage.py store_recount` sums every store again."""

from django.db import migrations, models, transaction
from django.db.models import OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

BATCH = 500


def store_sizes(apps, schema_editor):
    Agent, Memory = apps.get_model("agents", "Agent"), apps.get_model("memories", "Memory")
    total = (
        Memory.objects.filter(agent=OuterRef("pk")).order_by().values("agent").annotate(total=Sum("bytes"))
    )
    after = 0
    while True:
        ids = list(Agent.objects.filter(id__gt=after).order_by("id").values_list("id", flat=True)[:BATCH])
        if not ids:
            return
        with transaction.atomic():
            Agent.objects.filter(id__in=ids).update(
                store_size=Coalesce(Subquery(total.values("total")), 0, output_field=models.BigIntegerField())
            )
        after = ids[-1]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("agents", "0021_checkpoint_closed_unlisted"),
        ("memories", "0008_memory_recent_first"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent", name="store_size", field=models.PositiveBigIntegerField(default=0)
        ),
        migrations.RunPython(store_sizes, migrations.RunPython.noop),
    ]
