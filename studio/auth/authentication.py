"""How the REST API knows who is calling (`Authorization: Bearer <key>`),
and whether a page's session still signs its user in."""

from importlib import import_module

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, load_backend
from django.utils.crypto import constant_time_compare
from rest_framework import authentication, exceptions, permissions

from studio.auth.keys import apikey_verify


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, text = header.partition(" ")
        if scheme.lower() != "bearer" or not text.strip():
            raise exceptions.AuthenticationFailed("Send the key as 'Authorization: Bearer <api key>'.")
        key = apikey_verify(text.strip())
        if key is None:
            raise exceptions.AuthenticationFailed("This API key is not valid.")
        return (None, key)

    def authenticate_header(self, request):
        # Having a challenge makes DRF answer 401 rather than 403.
        return 'Bearer realm="api"'


class HasGameKey(permissions.BasePermission):
    message = "Send an API key: 'Authorization: Bearer <api key>'."

    def has_permission(self, request, view):
        if request.auth is None:
            raise exceptions.NotAuthenticated(self.message)
        return True


class IsAdminKey(HasGameKey):
    message = "This needs an admin key; this key is a designer key."

    def has_permission(self, request, view):
        return super().has_permission(request, view) and request.auth.is_admin


def session_signs_in(session_key: str | None, user_id: int) -> bool:
    """Whether session `session_key` still signs in user `user_id`, as
    Django's `get_user` would find on the page's next request: the session
    is kept (not signed out, not expired), still this user's, the user
    still active, and its auth hash still the user's (a password change
    ends every session) under the secret key or a fallback. Read only:
    unlike `get_user` it neither flushes the session nor cycles its key
    (that would sign the browser out, its cookie naming the old key)."""
    if not session_key:
        return False
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    backend = session.get(BACKEND_SESSION_KEY)
    if session.get(SESSION_KEY) != str(user_id) or backend not in settings.AUTHENTICATION_BACKENDS:
        return False
    user = load_backend(backend).get_user(user_id)
    if user is None:
        return False
    session_hash = session.get(HASH_SESSION_KEY) or ""
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    return any(constant_time_compare(session_hash, known) for known in hashes)
