from django.core.management.base import BaseCommand

from agents.sweep import sweep


class Command(BaseCommand):
    help = (
        "End turns whose process died, charge the model calls they left open and hand out again "
        "compactions whose worker died, across every game (what the Celery beat task does every "
        "STUDIO_SWEEP_SECONDS; run this from a timer where there is no broker)."
    )

    def handle(self, *args, **options):
        found = sweep()
        self.stdout.write("tidied what dead processes left" if found else "nothing to tidy")
