"""Model providers by the agent's `model` string: `scripted`,
`openai:<model>`, `anthropic:<model>`."""

import json
from functools import lru_cache
from typing import TYPE_CHECKING

from django.conf import settings

from studio.errors import DomainError
from studio.tokens import count_tokens

from .base import ProviderError
from .prompts import chat_tools, messages_tools, tool_specs
from .scripted import ScriptedProvider

if TYPE_CHECKING:
    from studio.models import Game

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
            said = (
                "this agent uses the test model 'scripted', which this studio no longer offers "
                "(STUDIO_ALLOW_SCRIPTED_MODEL is off); redefine the agent with 'openai:<model>' "
                "or 'anthropic:<model>'"
            )
            raise ProviderError(said, public=said)
        return ScriptedProvider()
    if model.startswith("openai:"):
        from .openai_chat import OpenAIProvider

        return OpenAIProvider(model.removeprefix("openai:"))
    if model.startswith("anthropic:"):
        from .anthropic_messages import AnthropicProvider

        return AnthropicProvider(model.removeprefix("anthropic:"))
    said = f"no provider serves the model '{model}'"
    raise ProviderError(said, public=said)


# --- what a call is given, counted ---------------------------------------------------------


def tools_sent(model: str, names: list[str], game_tools=()) -> list[dict]:
    """The tool definitions sent with a call of `model` that offers `names`
    (the game's own among them from `game_tools`), in its provider's shape
    (the scripted model is given the studio's own)."""
    if model.startswith("openai:"):
        return chat_tools(names, game_tools)
    if model.startswith("anthropic:"):
        return messages_tools(names, game_tools)
    return tool_specs(names, game_tools)


# Speed: encoding and counting the tools on every send; guarded by bench/send_overhead.py (plain p50).
@lru_cache(maxsize=256)
def _tool_tokens(model: str, names: tuple[str, ...], game_tools: str) -> int:
    if not names:
        return 0
    return count_tokens(
        json.dumps(tools_sent(model, list(names), json.loads(game_tools)), ensure_ascii=False)
    )


def tool_tokens(model: str, names: list[str], game_tools=()) -> int:
    """Tokens of the tool definitions a call of `model` offering `names`
    (the game's own from `game_tools`) sends."""
    return _tool_tokens(
        model, tuple(names), json.dumps(list(game_tools), sort_keys=True) if game_tools else "[]"
    )


def counts_are_exact(model: str) -> bool:
    """Whether the studio's token counts (cl100k, offline) are the model's
    own: only for `scripted`, which counts with it. A real provider's model
    has a tokenizer of its own (or one not shipped offline), and its server
    renders messages and tools into a template of its own before counting,
    so for it the counts are estimates."""
    return model == "scripted"


def studio_default_model() -> str | None:
    """The studio's default model: STUDIO_DEFAULT_MODEL, else `scripted`
    where it is offered, else none."""
    return settings.STUDIO["DEFAULT_MODEL"] or ("scripted" if scripted_allowed() else None)


def default_model(game: "Game") -> str | None:
    """The model a definition in `game` that names none gets: the game's
    default, else the studio's; None when there is neither."""
    return game.default_model or studio_default_model()
