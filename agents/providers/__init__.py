"""Model providers by the agent's `model` string: `scripted`,
`openai:<model>`, `anthropic:<model>`."""

from django.conf import settings

from studio.errors import DomainError

from .base import ProviderError
from .scripted import ScriptedProvider

PROVIDER_PREFIXES = ("openai:", "anthropic:")


def scripted_allowed() -> bool:
    """Whether the `scripted` test model is offered: STUDIO_ALLOW_SCRIPTED_MODEL,
    on with DJANGO_DEBUG."""
    return settings.STUDIO["ALLOW_SCRIPTED_MODEL"]


def model_check(model: str) -> None:
    """Refuse, at definition time, a model string no provider serves."""
    if model == "scripted":
        if scripted_allowed():
            return
        raise DomainError(
            "The 'scripted' model is a test model and this studio does not offer it: choose "
            "'openai:<model>' or 'anthropic:<model>', or have the operator set "
            "STUDIO_ALLOW_SCRIPTED_MODEL=1 (or DJANGO_DEBUG=true) for a test or demo setup.",
            code="invalid_definition",
        )
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
        if not scripted_allowed():
            raise ProviderError(
                "this agent uses the test model 'scripted', which this studio no longer offers "
                "(STUDIO_ALLOW_SCRIPTED_MODEL is off); redefine the agent with 'openai:<model>' "
                "or 'anthropic:<model>'"
            )
        return ScriptedProvider()
    if model.startswith("openai:"):
        from .openai_chat import OpenAIProvider

        return OpenAIProvider(model.removeprefix("openai:"))
    if model.startswith("anthropic:"):
        from .anthropic_messages import AnthropicProvider

        return AnthropicProvider(model.removeprefix("anthropic:"))
    raise ProviderError(f"No provider serves the model '{model}'.")
