"""Why a model call failed, in terms a designer can act on: a few classes,
each with a label and a sentence saying what it means and who can fix it,
and the provider's own words with the operator's secrets taken out.

The providers classify what they meet (`status_cause` for an HTTP
refusal, a class of its own for a timeout, a stop reason…) and keep the
provider's words scrubbed (`words`); the whole message, secrets and
addresses included, goes only to the log (`engine.model_error_text`).
"""

import re
from urllib.parse import urlsplit

from django.conf import settings

AUTH_REFUSED = "auth_refused"
RATE_LIMITED = "rate_limited"
QUOTA_EXHAUSTED = "quota_exhausted"
MODEL_NOT_FOUND = "model_not_found"
CONTEXT_TOO_LONG = "context_too_long"
OUTPUT_REFUSED = "output_refused"
OUTPUT_LIMIT = "output_limit"
REQUEST_REFUSED = "request_refused"
PROVIDER_DOWN = "provider_down"
PROVIDER_TIMEOUT = "provider_timeout"
PROVIDER_UNREACHABLE = "provider_unreachable"
ANSWER_UNREADABLE = "answer_unreadable"
NOT_CONFIGURED = "not_configured"

# Each class: its label (what the page's badge says) and what to do.
CAUSES = {
    AUTH_REFUSED: (
        "auth refused",
        "The provider refused the studio's credentials (a missing, wrong or revoked API key): nothing in "
        "the agent causes this; the studio's operators set the key.",
    ),
    RATE_LIMITED: (
        "rate-limited",
        "The provider is limiting how fast the studio may call it: wait a little and send again; if it "
        "keeps happening, the studio's operators can ask the provider for higher limits.",
    ),
    QUOTA_EXHAUSTED: (
        "out of quota",
        "The studio's account with the provider is out of quota or credit (the provider's, not the "
        "game's credits): the studio's operators top it up.",
    ),
    MODEL_NOT_FOUND: (
        "model not found",
        "The provider does not know the agent's model, or the studio's key may not use it: check the "
        "model's name in the agent's config.",
    ),
    CONTEXT_TOO_LONG: (
        "context too long",
        "What the model was sent is longer than its context window: lower the agent's maxTokens below "
        "the model's window (compaction then folds history sooner), or choose a model with a larger one.",
    ),
    OUTPUT_REFUSED: (
        "output refused",
        "The provider's safety filter refused this message or the answer to it: rephrase the player's "
        "message, or look in the system prompt for what could trip it.",
    ),
    OUTPUT_LIMIT: (
        "output limit",
        "The model reached its output limit before it finished: the studio's operators set that limit "
        "(STUDIO_MODEL_MAX_OUTPUT_TOKENS).",
    ),
    REQUEST_REFUSED: (
        "request refused",
        "The provider refused the request as one it cannot take: if its words below do not say why, the "
        "studio's operators can find the request in the studio's logs.",
    ),
    PROVIDER_DOWN: (
        "provider down",
        "The provider failed on its side (an outage, or it is overloaded): nothing to change in the "
        "agent; send again later.",
    ),
    PROVIDER_TIMEOUT: (
        "provider timed out",
        "Send again; a long context makes answers slower. If it keeps happening, the studio's operators "
        "can raise STUDIO_MODEL_TIMEOUT_SECONDS.",
    ),
    PROVIDER_UNREACHABLE: (
        "provider unreachable",
        "The network failed, or an address is set wrong on the studio's side: ask the studio's operators.",
    ),
    ANSWER_UNREADABLE: (
        "answer unreadable",
        "Send again; if it keeps happening, the studio's operators can find why in its logs.",
    ),
    NOT_CONFIGURED: (
        "provider not set up",
        "Ask the studio's operators to set it up, or choose a model from another provider.",
    ),
}

# The most characters of a provider's words a failed turn keeps.
WORDS_MAX_CHARS = 300


def label(cause: str) -> str:
    return CAUSES[cause][0] if cause in CAUSES else ""


def advice(cause: str) -> str:
    return CAUSES[cause][1] if cause in CAUSES else ""


def status_cause(status: int, said: str = "") -> str:
    """The class of an HTTP refusal, from its status and what the provider
    said with it (its error's code, type and message)."""
    text = said.lower()
    if status == 413 or any(
        hint in text
        for hint in (
            "context_length",
            "context length",
            "context window",
            "prompt is too long",
            "too many tokens",
        )
    ):
        return CONTEXT_TOO_LONG
    if any(
        hint in text for hint in ("content_filter", "content_policy", "content management", "safety system")
    ):
        return OUTPUT_REFUSED
    if status in (401, 403):
        return AUTH_REFUSED
    if status == 402 or (status == 429 and any(hint in text for hint in ("quota", "billing", "credit"))):
        return QUOTA_EXHAUSTED
    if status == 429:
        return RATE_LIMITED
    if status == 404 or "model_not_found" in text or ("model" in text and "does not exist" in text):
        return MODEL_NOT_FOUND
    if status == 408:
        return PROVIDER_TIMEOUT
    if status >= 500:
        return PROVIDER_DOWN
    if status < 400:  # an error in a stream that began well: its type says what it is
        return _stream_error_cause(text)
    return REQUEST_REFUSED


def _stream_error_cause(text: str) -> str:
    for hints, cause in (
        (("rate_limit",), RATE_LIMITED),
        (("overloaded", "server_error", "api_error"), PROVIDER_DOWN),
        (("authentication", "permission", "invalid_api_key"), AUTH_REFUSED),
        (("not_found",), MODEL_NOT_FOUND),
    ):
        if any(hint in text for hint in hints):
            return cause
    return REQUEST_REFUSED


# --- the provider's words, without the operator's secrets ----------------------------------

_HIDDEN = [
    # Addresses: a URL whole, then what names a host.
    # (A URL's last character is no sentence's punctuation.)
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>]*[^\s\"'<>.,;:!?)\]]", re.IGNORECASE), "[address]"),
    (re.compile(r"\bbearer\s+\S+", re.IGNORECASE), "Bearer [key]"),
    # key=…, api_key: …, "token": "…"
    (
        re.compile(
            r"""\b(api[_-]?key|x-api-key|key|token|access[_-]?token|secret|password)(["']?\s*[=:]\s*["']?)[^\s"',;&]+""",
            re.IGNORECASE,
        ),
        r"\1\2[key]",
    ),
    # Keys by their look: sk-…, sk-ant-…, and masked ones (sk-abc***xyz).
    (re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_*\-]{3,}"), "[key]"),
    # The account's own names: an organization, a project.
    (re.compile(r"\b(?:org|proj)[-_][A-Za-z0-9]{4,}"), "[account]"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "[address]"),
    (re.compile(r"\[?::1\]?(?::\d+)?(?!\w)"), "[address]"),
    (re.compile(r"\blocalhost(?::\d+)?\b", re.IGNORECASE), "[address]"),
    (
        re.compile(r"\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}(?::\d+)?\b", re.IGNORECASE),
        "[address]",
    ),
]


def _configured_secrets() -> list[tuple[str, str]]:
    """What this studio's settings hold that no designer may read — the
    providers' keys, base URLs and their hosts — each with what stands in
    its place."""
    found = []
    for key_name, url_name in (
        ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
        ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    ):
        key, url = getattr(settings, key_name, ""), getattr(settings, url_name, "")
        if key:
            found.append((key, "[key]"))
        if url:
            parts = urlsplit(url)
            found += [(value, "[address]") for value in (url, parts.netloc, parts.hostname) if value]
    # Longest first, so a host inside a URL does not leave the URL's rest behind.
    return sorted((pair for pair in found if len(pair[0]) >= 4), key=lambda pair: len(pair[0]), reverse=True)


def scrub(text: str) -> str:
    """`text` with API keys, addresses and account names taken out."""
    for secret, replacement in _configured_secrets():
        text = text.replace(secret, replacement)
    for pattern, replacement in _HIDDEN:
        text = pattern.sub(replacement, text)
    return text


# A proxy's error page says its words in HTML.
_TAG = re.compile(r"<[^>]{0,200}>")


def words(text) -> str:
    """What a provider said, as a designer may read it: scrubbed, on one
    line, at most WORDS_MAX_CHARS characters ("" when it said nothing)."""
    if not isinstance(text, str):
        return ""
    text = " ".join(scrub(_TAG.sub(" ", text)).split())
    if len(text) > WORDS_MAX_CHARS:
        text = text[: WORDS_MAX_CHARS - 1] + "…"
    return text
