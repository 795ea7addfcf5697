import django.db.models.deletion
from django.db import migrations, models


def names_and_configs(apps, schema_editor):
    """Each replay made before: its copy's name, and the definition the
    copy plays with (its config, in the wire shape a definition sends)."""
    Replay = apps.get_model("agents", "Replay")
    for replay in Replay.objects.select_related("replay_agent").iterator():
        copy = replay.replay_agent
        replay.replay_agent_name = copy.name
        replay.config = {
            "systemPrompt": copy.system_prompt,
            "model": copy.model,
            "memory": {"maxOpenTokens": copy.max_open_tokens} if copy.memory_enabled else None,
            "compaction": {"type": copy.compaction_type, "maxTokens": copy.max_tokens},
        }
        replay.save(update_fields=["replay_agent_name", "config"])


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0015_turn_entries_cut_short"),
    ]

    operations = [
        migrations.AddField(
            model_name="replay",
            name="replay_agent_name",
            field=models.CharField(default="", max_length=64),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="replay",
            name="config",
            field=models.JSONField(default=dict),
        ),
        migrations.AddField(
            model_name="replay",
            name="kept",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(names_and_configs, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="replay",
            name="replay_agent",
            field=models.OneToOneField(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="replay",
                to="agents.agent",
            ),
        ),
    ]
