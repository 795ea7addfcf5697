"""The starting price list, as plain data (the seed migration uses it)."""

# model, input, output, cached input — credits per million tokens. `*`
# prices any model without a row of its own.
MODEL_PRICES = [
    ("scripted", "2.000000", "8.000000", "0.500000"),
    ("*", "2.500000", "10.000000", "1.250000"),
]

FEES = [("memory_access", "0.001000")]

# Real models at their providers' list prices (per million tokens, one
# credit a dollar), which the demo adds so docs/models.md's examples run.
EXAMPLE_PRICES = [
    ("openai:gpt-4o-mini", "0.150000", "0.600000", "0.075000"),
    ("openai:gpt-4o", "2.500000", "10.000000", "1.250000"),
    ("anthropic:claude-sonnet-4-5", "3.000000", "15.000000", "0.300000"),
    ("anthropic:claude-haiku-4-5", "1.000000", "5.000000", "0.100000"),
]


def seed(model_price, fee) -> None:
    """Create the default rows that are missing (never changes a price)."""
    from decimal import Decimal

    price_rows_add(MODEL_PRICES, model_price)
    for code, amount in FEES:
        fee.objects.get_or_create(code=code, defaults={"amount": Decimal(amount)})


def price_rows_add(prices, model_price=None) -> None:
    """Add the price rows that are missing (never changes a price).
    `model_price`: the model class (a migration passes its historical one)."""
    from decimal import Decimal

    if model_price is None:
        from billing.models import ModelPrice as model_price
    for model, inp, out, cached in prices:
        model_price.objects.get_or_create(
            model=model,
            defaults={
                "input_per_mtok": Decimal(inp),
                "output_per_mtok": Decimal(out),
                "cached_input_per_mtok": Decimal(cached),
            },
        )
