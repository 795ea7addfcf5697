"""Credits as numbers and as text: six places in the ledger and on the
wire, short where a person reads them."""

from decimal import ROUND_HALF_UP, Decimal

SIX_PLACES = Decimal("0.000001")


def credits(value) -> Decimal:
    return Decimal(value).quantize(SIX_PLACES, rounding=ROUND_HALF_UP)


def credits_text(value) -> str:
    """Credits on the wire: six places, nothing else ("1234.500000")."""
    return str(credits(value))


def credits_shown(value, *, signed: bool = False) -> str:
    """Credits as a person reads them, on every page and in every sentence
    the studio writes: two decimal places, thousands grouped ("1,234.50"),
    and below 0.1 as many more as two significant digits need ("0.065",
    "0.0025"; six at most, the ledger's own); `signed` marks a gain with
    "+". Where it is shown on a page the exact figure is a hover away (the
    `credits` template filter, billing/templatetags/money.py), and exports
    and the API carry six places (`credits_text`)."""
    amount = credits(value) + 0  # + 0 turns -0 into 0
    places = 2 if not amount else min(max(2, 1 - amount.copy_abs().adjusted()), 6)
    # Rounded half up, as the ledger rounds (a format alone rounds half to even).
    text = f"{amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP) + 0:,.{places}f}"
    if places > 2:  # "0.050" reads as "0.05": only the places two digits need
        whole, fraction = text.split(".")
        text = f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"
    return ("+" if signed and amount > 0 else "") + text


def credits_apart(first, second) -> tuple[str, str]:
    """Two amounts a sentence compares, shown as `credits_shown` does but
    with the places it takes to tell them apart ("needs 1.000002, has
    0.999999", not "needs 1.00, has 1.00")."""
    shown = credits_shown(first), credits_shown(second)
    if shown[0] != shown[1] or credits(first) == credits(second):
        return shown
    return f"{credits(first) + 0:,.6f}", f"{credits(second) + 0:,.6f}"
