from django.core.management.base import BaseCommand

from memories.store import store_sizes_recount


class Command(BaseCommand):
    help = (
        "Sum each agent's memories again into the store size its cap check reads, a few hundred "
        "agents a transaction (after a migration that ran while turns wrote memories). Safe to run "
        "at any time: a store's writes wait for its agent's batch."
    )

    def handle(self, *args, **options):
        off = store_sizes_recount()
        if not off:
            self.stdout.write("every store size was right")
        else:
            self.stdout.write(f"recounted the store size of {off:,} agent{'' if off == 1 else 's'}")
