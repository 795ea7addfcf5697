"""Credits on the pages: `{{ amount|credits }}` ("1,234.500000"), and
`{{ amount|credits:"signed" }}` for a change ("+250.000000"). The same
text as `ledger.credits_shown`, which the sentences the studio writes use."""

from django import template

from billing.ledger import credits_shown

register = template.Library()


@register.filter
def credits(value, how: str = "") -> str:
    if value is None or value == "":
        return ""
    return credits_shown(value, signed=how == "signed")
