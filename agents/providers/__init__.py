"""Model providers by the agent's `model` string: `scripted`,
`openai:<model>`, `anthropic:<model>`."""

from studio.errors import DomainError

from .base import ProviderError
from .scripted import ScriptedProvider

PROVIDER_PREFIXES = ("openai:", "anthropic:")


def model_check(model: str) -> None:
    """Refuse, at definition time, a model string no provider serves."""
    if model == "scripted":
        return
    for prefix in PROVIDER_PREFIXES:
        if model.startswith(prefix) and len(model) > len(prefix):
            return
    raise DomainError(
        f"Unknown model '{model}': use 'scripted', 'openai:<model>' or 'anthropic:<model>'.",
        code="invalid_definition",
    )


def provider_for(model: str):
    if model == "scripted":
        return ScriptedProvider()
    raise ProviderError(f"The provider for '{model}' is not available in this build yet.")
