"""How the REST API knows who is calling: `Authorization: Bearer <key>`."""

from rest_framework import authentication, exceptions, permissions

from .keys import apikey_verify


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
