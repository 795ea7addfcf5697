"""An index of each agent's memories, the most recently written first: a
refused open_memory names the newest, and a checkpoint lists the newest
closed ones, reading a page of it rather than sorting the whole store.

On PostgreSQL it is built CONCURRENTLY, so memories go on being written
while it builds (and so this migration runs outside a transaction)."""

from django.db import migrations, models


class AddIndexWithoutLocking(migrations.AddIndex):
    """AddIndex, built without blocking writes where the database can."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, **_concurrently(schema_editor))

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, **_concurrently(schema_editor))


def _concurrently(schema_editor) -> dict:
    return {"concurrently": True} if schema_editor.connection.vendor == "postgresql" else {}


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("agents", "0021_checkpoint_closed_unlisted"),
        ("memories", "0007_file_changes_by_file"),
    ]

    operations = [
        AddIndexWithoutLocking(
            model_name="memory",
            index=models.Index(fields=["agent", "-updated_at", "-id"], name="memory_recent_first"),
        ),
    ]
