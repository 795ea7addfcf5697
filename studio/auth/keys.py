"""API keys: made once, kept only as a digest, checked in constant time."""

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from studio.models import ApiKey, Game, Role
from studio.runtime import sql

KEY_PREFIX = "sk_"
# A key's last use is known to within this: the auth path, which every API
# request runs, writes it at most this often per key.
LAST_USE_STEP = timedelta(minutes=5)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def apikey_create(*, game: Game, role: str = Role.DESIGNER, label: str = "") -> tuple[ApiKey, str]:
    """Make a key for `game`; returns the row and the key text, which is
    never stored and cannot be shown again."""
    if role not in Role.values:
        raise ValueError(f"role must be one of {', '.join(Role.values)}")
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    key = ApiKey.objects.create(game=game, role=role, prefix=prefix, digest=_digest(secret), label=label)
    return key, f"{KEY_PREFIX}{prefix}_{secret}"


def apikey_verify(text: str) -> ApiKey | None:
    """The live key that `text` is, or None."""
    if not text.startswith(KEY_PREFIX):
        return None
    prefix, _, secret = text[len(KEY_PREFIX) :].partition("_")
    if not prefix or not secret:
        return None
    key = _live_key(prefix)
    # Compare even when no row matched, so a wrong prefix costs the same time.
    expected = key.digest if key else _digest("")
    if not hmac.compare_digest(expected, _digest(secret)) or key is None:
        return None
    _last_use_record(key)
    return key


def _last_use_record(key: ApiKey) -> None:
    """Stamp the key's last use when the one it was read with is a step old:
    a statement every few minutes per key, none on the requests between."""
    now = timezone.now()
    # Speed: an UPDATE per API request; guarded by bench/agent_server.py (server CPU per message).
    if key.last_used_at is not None and now - key.last_used_at < LAST_USE_STEP:
        return
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USE_STEP)
    ApiKey.objects.filter(stale, pk=key.pk).update(last_used_at=now)
    key.last_used_at = now


def apikey_named(key: ApiKey) -> str:
    """A key as a record of who did something names it: its prefix (never
    its secret) and its label, or its role."""
    return f"API key {KEY_PREFIX}{key.prefix}… ({key.label or key.role})"


def apikey_prefix_of(text: str) -> str:
    """The prefix in `text`: a key's prefix, with `sk_` or without, or the
    whole key."""
    return text.strip().removeprefix(KEY_PREFIX).partition("_")[0]


def apikey_revoke(*, prefix: str) -> tuple[ApiKey | None, bool]:
    """Revoke the key with `prefix`: the key (None when there is none) and
    whether this call revoked it (False: it already was). Streams opened
    with it end at their next look at it (STUDIO_WS_REJOIN_SECONDS)."""
    revoked = ApiKey.objects.filter(prefix=prefix, revoked_at__isnull=True).update(revoked_at=timezone.now())
    return ApiKey.objects.select_related("game").filter(prefix=prefix).first(), bool(revoked)


def apikey_is_live(key_id: int) -> bool:
    """Whether the key is still there and not revoked (for a stream opened
    with it, looking again while it stays open)."""
    return ApiKey.objects.filter(pk=key_id, revoked_at__isnull=True).exists()


def _live_key(prefix: str) -> ApiKey | None:
    """The unrevoked key with `prefix`, its game with it: read on every API
    request, so written out (studio/runtime/sql.py says why)."""
    # Speed: ORM statement building (studio/runtime/sql.py); guarded by bench/agent_server.py (server CPU per message).
    table, games = ApiKey._meta.db_table, Game._meta.db_table
    row = sql.one(
        f"SELECT {sql.columns(ApiKey, 'k')}, {sql.columns(Game, 'g')} FROM {table} k "
        f"JOIN {games} g ON g.id = k.game_id WHERE k.prefix = %s AND k.revoked_at IS NULL "
        "ORDER BY k.id LIMIT 1",
        [prefix],
    )
    if row is None:
        return None
    split = len(ApiKey._meta.concrete_fields)
    key = sql.instance(ApiKey, row[:split])
    key.game = sql.instance(Game, row[split:])
    return key
