# Where a fork came from (the agent, by name, and the block), and the class
# of a failed turn's model call (#36). Agents and turns made before it have
# neither: a fork made before says so only in its revision's note.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0019_compaction_replay_request_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="forked_from",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="agent",
            name="forked_at_block",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="turn",
            name="error_class",
            field=models.CharField(blank=True, max_length=32),
        ),
    ]
