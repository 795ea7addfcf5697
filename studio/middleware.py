"""Django's middleware, run synchronously under ASGI.

Django's built-in middleware are "async-capable" by running each of their
hooks through `sync_to_async`: under Daphne a request crossed between the
event loop and a worker thread about fourteen times before it reached a
view — some 4 ms of CPU per request, more than a plain API read costs. Marked
sync-only, the whole stack runs in one worker thread: Django crosses once
into it, and once back for the view. Behaviour is unchanged; these are the
same classes.
"""

from django.contrib.auth.middleware import AuthenticationMiddleware as _Authentication
from django.contrib.messages.middleware import MessageMiddleware as _Message
from django.contrib.sessions.middleware import SessionMiddleware as _Session
from django.middleware.clickjacking import XFrameOptionsMiddleware as _XFrameOptions
from django.middleware.common import CommonMiddleware as _Common
from django.middleware.csrf import CsrfViewMiddleware as _CsrfView
from django.middleware.security import SecurityMiddleware as _Security


class SecurityMiddleware(_Security):
    async_capable = False


class SessionMiddleware(_Session):
    async_capable = False


class CommonMiddleware(_Common):
    async_capable = False


class CsrfViewMiddleware(_CsrfView):
    async_capable = False


class AuthenticationMiddleware(_Authentication):
    async_capable = False


class MessageMiddleware(_Message):
    async_capable = False


class XFrameOptionsMiddleware(_XFrameOptions):
    async_capable = False
