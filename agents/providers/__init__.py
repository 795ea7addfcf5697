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
    """The provider that serves `model` (imported lazily: the SDKs are only
    loaded by processes that use them)."""
    if model == "scripted":
        return ScriptedProvider()
    if model.startswith("openai:"):
        from .openai_chat import OpenAIProvider

        return OpenAIProvider(model.removeprefix("openai:"))
    if model.startswith("anthropic:"):
        from .anthropic_messages import AnthropicProvider

        return AnthropicProvider(model.removeprefix("anthropic:"))
    raise ProviderError(f"No provider serves the model '{model}'.")
