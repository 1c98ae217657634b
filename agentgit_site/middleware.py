"""The web UI's Django middleware, not run for the REST API.

Sessions, CSRF cookies, the logged-in user and flash messages are the web UI's (people log in
with a session, repos/web/auth.py); an API request authenticates by its token (DRF, through the
request's Admission) and its views are CSRF-exempt, so for ``/api/`` these middleware only
spent time: ~0.3 ms of a read's ~1.8 ms in one process (docs/adr/0013). They are subclasses, so
the admin's system checks still find the middleware they require.

Skipping them changes no API answer: an API view never reads the session, the messages or
Django's ``request.user`` (DRF sets it, from the token), so none of their ``process_response``
had anything to do. CSRF's ``process_view`` still runs for every view (Django calls it apart
from the middleware's ``__call__``): a view under ``/api/`` that were not CSRF-exempt would still
be checked, from the cookie, as before.
"""

from __future__ import annotations

from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.deprecation import MiddlewareMixin

#: Where the REST API is mounted (agentgit_site/urls.py).
API_PREFIX = "/api/"


class _WebOnly(MiddlewareMixin):
    """Django's middleware (before it in the bases), passing API requests straight on."""

    def __call__(self, request):
        if request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        return super().__call__(request)


class WebSessionMiddleware(_WebOnly, SessionMiddleware):
    pass


class WebCsrfViewMiddleware(_WebOnly, CsrfViewMiddleware):
    pass


class WebAuthenticationMiddleware(_WebOnly, AuthenticationMiddleware):
    pass


class WebMessageMiddleware(_WebOnly, MessageMiddleware):
    pass
