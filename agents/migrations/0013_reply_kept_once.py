"""A turn's reply is kept once: a played turn's in its block, whose closing
assistant message it is. This empties the copy each played turn kept on
its row, in batches (each its own transaction, so a large table is never
locked whole); a reply its block does not hold is left where it is.
Undone, it puts each reply back on its turn for the code before."""

from django.db import migrations, transaction

BATCH = 1000


def _block_reply(status, entries):
    # As agents.selectors.block_reply, kept here as it was when written.
    last = entries[-1] if entries else {}
    is_reply = last.get("role") == "assistant" and "step" not in last
    return last["content"] if status == "completed" and is_reply else ""


def _batches(turns):
    """The ids of `turns`, BATCH at a time, in order."""
    after = 0
    while True:
        ids = list(turns.filter(id__gt=after).order_by("id").values_list("id", flat=True)[:BATCH])
        if not ids:
            return
        yield ids
        after = ids[-1]


def reply_kept_once(apps, schema_editor):
    Turn, Block = apps.get_model("agents", "Turn"), apps.get_model("agents", "Block")
    played = Turn.objects.filter(is_transient=False, status="completed").exclude(reply="")
    for ids in _batches(played):
        with transaction.atomic():
            entries = dict(Block.objects.filter(turn_id__in=ids).values_list("turn_id", "entries"))
            rows = Turn.objects.filter(id__in=ids).values_list("id", "status", "reply")
            kept = [pk for pk, status, reply in rows if reply == _block_reply(status, entries.get(pk, []))]
            Turn.objects.filter(id__in=kept).update(reply="")


def reply_from_block(apps, schema_editor):
    Turn, Block = apps.get_model("agents", "Turn"), apps.get_model("agents", "Block")
    played = Turn.objects.filter(is_transient=False, status="completed", reply="")
    for ids in _batches(played):
        with transaction.atomic():
            for turn_id, entries in Block.objects.filter(turn_id__in=ids).values_list("turn_id", "entries"):
                reply = _block_reply("completed", entries)
                if reply:
                    Turn.objects.filter(id=turn_id).update(reply=reply)


class Migration(migrations.Migration):
    # Each batch commits on its own.
    atomic = False

    dependencies = [
        ("agents", "0012_retention"),
    ]

    operations = [migrations.RunPython(reply_kept_once, reply_from_block)]
