"""The starting price list, as plain data (the seed migration uses it)."""

# model, input, output, cached input — credits per million tokens. `*`
# prices any model without a row of its own.
MODEL_PRICES = [
    ("scripted", "2.000000", "8.000000", "0.500000"),
    ("*", "2.500000", "10.000000", "1.250000"),
]

FEES = [("memory_access", "0.001000")]


def seed(model_price, fee) -> None:
    """Create the default rows that are missing (never changes a price)."""
    from decimal import Decimal

    for model, inp, out, cached in MODEL_PRICES:
        model_price.objects.get_or_create(
            model=model,
            defaults={
                "input_per_mtok": Decimal(inp),
                "output_per_mtok": Decimal(out),
                "cached_input_per_mtok": Decimal(cached),
            },
        )
    for code, amount in FEES:
        fee.objects.get_or_create(code=code, defaults={"amount": Decimal(amount)})
