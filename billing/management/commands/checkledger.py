from django.core.management.base import BaseCommand, CommandError

from billing.ledger import credits_text, ledger_check


class Command(BaseCommand):
    help = (
        "Check every game's balance against its ledger (credits in less cost lines out, never below "
        "zero), and what it holds against its live turns and compactions."
    )

    def handle(self, *args, **options):
        bad = 0
        for check in ledger_check():
            if check.is_consistent:
                self.stdout.write(f"ok      {check.game}: balance {credits_text(check.balance)}")
                continue
            bad += 1
            self.stdout.write(
                f"WRONG   {check.game}: balance {credits_text(check.balance)}, ledger says "
                f"{credits_text(check.expected)}; held {credits_text(check.held)}, live turns and "
                f"compactions hold {credits_text(check.expected_held)}; {check.live_turns} live turns "
                f"counted, {check.expected_live_turns} found"
                + ("; the balance is below zero" if check.balance < 0 else "")
            )
        if bad:
            raise CommandError(f"{bad} game(s) do not match their ledger.")
