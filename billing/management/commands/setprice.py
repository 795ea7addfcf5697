from django import forms
from django.core.management.base import BaseCommand, CommandError

from agents.providers import PROVIDER_PREFIXES
from billing import ledger
from billing.forms import SIX_PLACES, TOO_LARGE
from billing.models import ModelPrice

ARGUMENTS = {
    "model": "MODEL",
    "input_per_mtok": "INPUT",
    "output_per_mtok": "OUTPUT",
    "cached_input_per_mtok": "CACHED",
}


def price_field(what: str) -> forms.DecimalField:
    return forms.DecimalField(
        min_value=0,
        max_digits=18,
        decimal_places=6,
        error_messages={
            "invalid": f"Enter the price of {what} as a number of credits per million tokens, like 2.5.",
            "min_value": "A price is not below 0.",
            "max_digits": TOO_LARGE,
            "max_whole_digits": TOO_LARGE,
            "max_decimal_places": SIX_PLACES,
        },
    )


class PriceForm(forms.ModelForm):
    input_per_mtok = price_field("input tokens")
    output_per_mtok = price_field("output tokens")
    cached_input_per_mtok = price_field("cached input tokens")

    class Meta:
        model = ModelPrice
        fields = list(ARGUMENTS)

    def clean_model(self):
        model = self.cleaned_data["model"]
        named = any(model.startswith(prefix) and len(model) > len(prefix) for prefix in PROVIDER_PREFIXES)
        if not (named or model in ("*", "scripted")):
            raise forms.ValidationError(
                f"'{model}' is no model an agent can name: use openai:<model> or anthropic:<model> "
                "(as in the agent's definition), scripted, or * for every model without a price of its own."
            )
        return model


class Command(BaseCommand):
    help = (
        "Set a model's price in credits per million tokens (a new model's, or a change to one): input, "
        "output, and cached input — left out, a new model charges cached input as input and a priced one "
        "keeps its own. MODEL is the agent's model name (openai:gpt-4o-mini), or * for every model "
        "without a row of its own. Prints the row as the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("model")
        parser.add_argument("input", help="credits per million input tokens")
        parser.add_argument("output", help="credits per million output tokens")
        parser.add_argument("cached", nargs="?", help="credits per million cached input tokens")

    def handle(self, *args, model, input, output, cached, **options):
        row = ModelPrice.objects.filter(model=model).first()
        if cached is None:
            cached = row.cached_input_per_mtok if row else input
        values = {"input_per_mtok": input, "output_per_mtok": output, "cached_input_per_mtok": cached}
        form = PriceForm({"model": model, **values}, instance=row)
        if not form.is_valid():
            problems = [f"{ARGUMENTS[name]}: {' '.join(errors)}" for name, errors in form.errors.items()]
            raise CommandError(" ".join(problems))
        price = form.save()
        self.stderr.write(
            f"{'Changed' if row else 'Added'} the price of {model} (credits per million tokens):"
        )
        self.stdout.write(
            f"{price.model}  input {ledger.credits_text(price.input_per_mtok)}  "
            f"output {ledger.credits_text(price.output_per_mtok)}  "
            f"cached {ledger.credits_text(price.cached_input_per_mtok)}"
        )
