from django.core.management.base import BaseCommand, CommandError

from billing.ledger import credits_text, ledger_check


class Command(BaseCommand):
    help = "Check every game's balance against its ledger (credits in less cost lines out)."

    def handle(self, *args, **options):
        bad = 0
        for check in ledger_check():
            if check.is_consistent:
                self.stdout.write(f"ok      {check.game}: balance {credits_text(check.balance)}")
                continue
            bad += 1
            self.stdout.write(
                f"WRONG   {check.game}: balance {credits_text(check.balance)}, ledger says "
                f"{credits_text(check.expected)}; held {credits_text(check.held)}, live turns hold "
                f"{credits_text(check.expected_held)}"
            )
        if bad:
            raise CommandError(f"{bad} game(s) do not match their ledger.")
