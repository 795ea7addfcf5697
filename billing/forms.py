"""The forms money is moved and bounded with — on the billing page, and
(the adjustment's) in `manage.py adjustcredits` — each with sentences a
person can act on."""

from decimal import Decimal

from django import forms

from .ledger import credits_shown

TOO_LARGE = "That amount is too large."
SIX_PLACES = "Credits have at most six decimal places."


class AdjustmentForm(forms.Form):
    amount = forms.DecimalField(
        max_digits=18,
        decimal_places=6,
        error_messages={
            "required": "Enter an amount of credits: 250 adds, -10.5 takes away.",
            "invalid": "Enter the amount as a number of credits, like 250 or -10.5.",
            "max_digits": TOO_LARGE,
            "max_whole_digits": TOO_LARGE,
            "max_decimal_places": SIX_PLACES,
        },
    )
    reason = forms.CharField(
        max_length=2000,
        error_messages={"required": "Give a reason: every adjustment is kept with who made it and why."},
    )
    # Ticked to go ahead with a large take-away (see `clean`).
    confirm = forms.BooleanField(required=False)

    def __init__(self, *args, balance: Decimal | None = None, **kwargs):
        """`balance`: the game's, for a take-away of half of it or more to
        ask for confirmation (the billing page's form, where one click
        would make it); None: no confirmation (a command's arguments are
        deliberate)."""
        super().__init__(*args, **kwargs)
        self.balance = balance

    def clean_amount(self):
        amount = self.cleaned_data["amount"]
        if amount == 0:
            raise forms.ValidationError(
                "An adjustment of 0 changes nothing: enter an amount to add or take away."
            )
        return amount

    def clean(self):
        data = super().clean()
        amount = data.get("amount")
        if (
            amount is None
            or self.balance is None
            or data.get("confirm")
            or not is_large_take_away(amount, self.balance)
        ):
            return data
        self.add_error(
            "confirm",
            f"This takes away {credits_shown(-amount)} credits, leaving {credits_shown(self.balance + amount)} "
            f"of {credits_shown(self.balance)}. Tick the box to confirm, then press Adjust again.",
        )
        return data


def is_large_take_away(amount: Decimal, balance: Decimal) -> bool:
    """A take-away of half the balance or more (or of more than it holds)."""
    return amount < 0 and -amount * 2 >= balance


def limit_field(what: str, example: str) -> forms.DecimalField:
    """A limit in credits: none, or zero and up."""
    return forms.DecimalField(
        required=False,
        min_value=0,
        max_digits=18,
        decimal_places=6,
        error_messages={
            "invalid": f"Enter the {what} as a number of credits, like {example}.",
            "min_value": f"The {what} cannot be negative.",
            "max_digits": TOO_LARGE,
            "max_whole_digits": TOO_LARGE,
            "max_decimal_places": SIX_PLACES,
        },
    )


class LimitForm(forms.Form):
    """One limit: set to the posted value, or cleared (`clearing`, its
    form's second button) — an empty value is a mistake only when setting."""

    name = ""
    missing = ""

    def __init__(self, *args, clearing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.clearing = clearing

    def clean(self):
        if not self.clearing and self.cleaned_data.get(self.name) is None and not self.errors:
            raise forms.ValidationError(self.missing)
        return self.cleaned_data

    def value(self):
        """The limit to set: None when clearing."""
        return None if self.clearing else self.cleaned_data[self.name]


class LimitsForm(LimitForm):
    monthly_cap = limit_field("cap", "500")
    name = "monthly_cap"
    missing = "Enter a monthly cap, or use “Remove cap” to have none."


class AlertForm(LimitForm):
    low_balance_alert = limit_field("alert", "10")
    name = "low_balance_alert"
    missing = "Enter a balance to be alerted below, or use “Turn off” to have no alert."


class AlertPlacesForm(forms.Form):
    """Where the game's budget alerts go: a webhook URL (checked by
    `alerts.url_check` when saved) and an e-mail address (blank: the
    game's admins' own)."""

    webhook_url = forms.CharField(
        required=False,
        max_length=2000,
        strip=True,
        error_messages={"max_length": "The webhook URL is longer than 2,000 characters."},
    )
    email = forms.EmailField(
        required=False,
        max_length=254,
        error_messages={"invalid": "Enter an e-mail address, like ops@example.com, or leave it blank."},
    )
