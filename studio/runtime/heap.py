"""The web process's heap, settled once it has loaded what it serves with.

Python's cyclic garbage collector walks every object it tracks on each full
pass. A web process holds ~150,000 such objects once Django and the studio
are loaded, and ~65,000 more once a model provider's SDK is (the Anthropic
SDK alone ~150,000), none of which will ever be garbage; a crowd of sends at
once (players each talking to their character) promotes enough short-lived
objects to set off a full pass every hundred sends or so, and each walked
all of it.
"""

import gc
import importlib

from django.conf import settings

# A provider's SDK, and the settings that say this deployment calls it.
_SDKS = (
    ("openai", ("OPENAI_API_KEY", "OPENAI_BASE_URL")),
    ("anthropic", ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")),
)


def heap_settle() -> None:
    """Load the SDK of each provider this deployment is configured for (a
    call would load it at the first send, which would wait for it), then
    set everything loaded aside from the collector's passes (`gc.freeze`)."""
    # Speed: full garbage-collector passes that walked every object loaded at start; guarded by bench/players.py (server CPU per send).
    for module, names in _SDKS:
        if any(getattr(settings, name, "") for name in names):
            importlib.import_module(module)
    gc.collect()
    gc.freeze()
