"""Who defined an agent's config, and from where: what each revision
(`AgentRevision`) records of the definition that wrote it, and the words
the pages and refusals say it in.

A definition is made by a person in the studio (a user: its pages, the
Django admin, a replay's "Use this definition", a fork or an import made
there) or by game code (an API key: a PUT, a fork or an import through
the API). A key is recorded by its label (its role when it has none) and
its prefix — never its secret. The demo's setup and commands run on the
server record nobody.
"""

from django.contrib.auth.models import AbstractBaseUser

from agents.models import AgentRevision, DefinedVia
from studio.auth.keys import KEY_PREFIX
from studio.models import ApiKey

# Who defines: a studio user, an API key, or nobody recorded.
Definer = AbstractBaseUser | ApiKey | None


def by_fields(by: Definer) -> dict:
    """The revision's fields that record `by`."""
    if by is None:
        return {"by_name": "", "by_key": ""}
    if isinstance(by, ApiKey):
        return {"by_name": by.label or by.role, "by_key": by.prefix}
    return {"by_name": by.get_username(), "by_key": ""}


def key_shown(prefix: str) -> str:
    """A key as records show it: its prefix, which `manage.py revokekey` takes."""
    return f"{KEY_PREFIX}{prefix}"


# How the pages say where a revision came from, by who defined it: `{key}`
# is an API key's name, `{user}` a user's (filled in, escaped, by the caller).
_BY_KEY = {
    DefinedVia.API: "Defined by game code — key {key}",
    DefinedVia.IMPORT: "Imported by game code — key {key}",
    DefinedVia.FORK: "Forked by game code — key {key}",
}
_BY_USER = {
    DefinedVia.PAGE: "Edited in the studio by {user}",
    DefinedVia.ADMIN: "Edited in the Django admin by {user}",
    DefinedVia.REPLAY: "Given a replay’s definition by {user}",
    DefinedVia.IMPORT: "Imported in the studio by {user}",
    DefinedVia.FORK: "Forked in the studio by {user}",
}
_BY_NOBODY = {
    DefinedVia.API: "Defined by game code",
    DefinedVia.PAGE: "Edited in the studio",
    DefinedVia.ADMIN: "Edited in the Django admin",
    DefinedVia.REPLAY: "Set by a replay",
    DefinedVia.IMPORT: "From an imported agent file",
    DefinedVia.FORK: "Copied with a fork",
    DefinedVia.DEMO: "Set up by the demo (seed_demo)",
    DefinedVia.COMMAND: "Defined by a command on the server",
    DefinedVia.UNKNOWN: "Defined before the studio recorded who and from where",
}


def provenance_phrase(revision: AgentRevision | None) -> tuple[str, dict]:
    """Who defined `revision` and from where, as a phrase to format with
    its names (`{key}`, `{user}`), and the names. None: not kept."""
    if revision is None:
        return _BY_NOBODY[DefinedVia.UNKNOWN], {}
    via = DefinedVia(revision.via) if revision.via in DefinedVia.values else DefinedVia.UNKNOWN
    if revision.by_key:
        phrase = _BY_KEY.get(via, f"From {via.label}, by key {{key}}")
        return phrase, {"key": revision.by_name}
    if revision.by_name:
        return _BY_USER.get(via, f"From {via.label}, by {{user}}"), {"user": revision.by_name}
    return _BY_NOBODY[via], {}


def provenance_text(revision: AgentRevision | None) -> str:
    """`provenance_phrase` as plain text (a key's name in backquotes)."""
    phrase, names = provenance_phrase(revision)
    return phrase.format(key=f"`{names.get('key', '')}`", user=names.get("user", ""))


def is_game_code(revision: AgentRevision | None) -> bool:
    """Whether game code (a PUT through the API) wrote `revision`: then the
    game's next construct of the agent replaces an edit made in the pages."""
    return revision is not None and revision.via == DefinedVia.API
