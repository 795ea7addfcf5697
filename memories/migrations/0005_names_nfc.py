"""Memory names in Unicode NFC form, as every path that takes a name now
normalizes it (memories.store.memory_name). A name kept in another form is
renamed, its history with it — unless the agent already has the NFC name
(two memories that looked alike): that one is left as it was."""

import unicodedata

from django.db import migrations


def names_nfc(apps, schema_editor):
    Memory = apps.get_model("memories", "Memory")
    MemoryEvent = apps.get_model("memories", "MemoryEvent")
    for memory in Memory.objects.exclude(name__regex=r"^[ -~]*$").iterator():
        name = unicodedata.normalize("NFC", memory.name)
        if name == memory.name or Memory.objects.filter(agent_id=memory.agent_id, name=name).exists():
            continue
        MemoryEvent.objects.filter(agent_id=memory.agent_id, name=memory.name).update(name=name)
        Memory.objects.filter(pk=memory.pk).update(name=name)


class Migration(migrations.Migration):
    dependencies = [("memories", "0004_memory_plural")]

    operations = [migrations.RunPython(names_nfc, migrations.RunPython.noop)]
