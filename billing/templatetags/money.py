"""Credits on the pages: `{{ amount|credits }}` reads "1,234.50" (two
decimal places; below 0.1, as many as two significant digits need:
"0.0025"), with the exact figure on hover ("1234.500000 credits"), and
`{{ amount|credits:"signed" }}` for a change ("+250.00"). The text is
`ledger.credits_shown`'s, which the sentences the studio writes use; the
exact figure `ledger.credits_text`'s, which the API and exports carry."""

from django import template
from django.utils.html import format_html

from billing.money import credits_shown, credits_text

register = template.Library()


@register.filter
def credits(value, how: str = "") -> str:
    if value is None or value == "":
        return ""
    return format_html(
        '<span class="amount" title="{} credits">{}</span>',
        credits_text(value),
        credits_shown(value, signed=how == "signed"),
    )
