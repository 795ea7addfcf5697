from django.db import migrations, models
from django.db.models import Count, Q


def live_turns_count(apps, schema_editor):
    """Each account counts the turns its `held` is for, as they stand."""
    Account = apps.get_model("billing", "Account")
    Turn = apps.get_model("agents", "Turn")
    holding = Q(status__in=["queued", "running"]) | Q(open_call_tokens__isnull=False)
    counts = Turn.objects.filter(holding).values("agent__game_id").annotate(n=Count("id"))
    for row in counts:
        Account.objects.filter(game_id=row["agent__game_id"]).update(live_turns=row["n"])


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0004_low_balance_alert"),
        ("agents", "0009_compaction_holds"),
    ]

    operations = [
        migrations.AddField(
            model_name="account",
            name="live_turns",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(live_turns_count, migrations.RunPython.noop),
    ]
