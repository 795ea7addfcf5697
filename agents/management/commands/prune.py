from django.core.management.base import BaseCommand

from agents.history import retention

UNITS = ("bytes", "KB", "MB", "GB", "TB")


def size_text(count: int | None) -> str:
    if count is None:
        return "size not known"  # SQLite does not say
    size, unit = float(count), 0
    while size >= 1024 and unit < len(UNITS) - 1:
        size, unit = size / 1024, unit + 1
    return f"about {size:,.0f} {UNITS[unit]}" if unit == 0 else f"about {size:,.1f} {UNITS[unit]}"


def found_line(found: retention.Found) -> str:
    setting = f"  ({found.setting}={found.value})" if found.setting else ""
    if found.is_kept:
        return f"  {found.kind:<24}{'kept for good':>32}{setting}"
    return f"  {found.kind:<24}{found.rows:>12,} rows {size_text(found.bytes):>15}{setting}"


class Command(BaseCommand):
    help = (
        "Delete what the studio keeps no longer (the STUDIO_RETAIN_* settings and STUDIO_KEEP_REVISIONS; "
        "idempotency keys after 24 hours, expired sessions and ended replays' copies always), in batches, "
        "safe while the studio serves. With --dry-run, "
        "delete nothing and print what would go, per kind, and about how much space it takes."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="delete nothing; say what would go")

    def handle(self, *args, dry_run, **options):
        found = retention.prune(dry_run=dry_run)
        self.stdout.write("A dry run: nothing was deleted. Past keeping now:" if dry_run else "Pruned:")
        for kind in found:
            self.stdout.write(found_line(kind))
        sizes = [kind.bytes for kind in found if not kind.is_kept]
        total = None if None in sizes else sum(sizes)
        self.stdout.write(f"In all {size_text(total)}.")
