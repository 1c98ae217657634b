"""DRF authentication by API token: ``Authorization: Bearer <token>``, or HTTP Basic with the
token as the password (what git clients send; the user name is ignored).

Both give views ``request.user`` = the credential's user and ``request.auth`` = the Credential.
They do not parse or look up anything themselves: the request's :class:`Admission`
(repos.services.admission) does, once. Under ASGI the middleware made it and passed it down in
the scope (``scope["agentgit.admission"]``); a request that did not come through the middleware
(Django's test client, WSGI) gets one made from its own headers (``admission_of``), so both paths
run the same code. A bad token raises ``repos.errors.Unauthenticated``, which the API's exception handler
turns into the one JSON error shape with status 401.
"""

from __future__ import annotations

from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request
from rest_framework.settings import api_settings

from ..errors import Unauthenticated
from ..models import Credential
from ..services.admission import BASIC, BASIC_CHALLENGE, BEARER, BEARER_CHALLENGE, admission_of


class _TokenAuthentication(BaseAuthentication):
    """Shared flow: the request's Admission, if the token came with this class's scheme."""

    scheme: str

    def authenticate(self, request: Request) -> tuple[object, Credential] | None:
        admission = admission_of(request)
        if admission.scheme != self.scheme:
            return None  # not ours: another authenticator (or none) may take it
        try:
            credential = admission.credential()
        except Unauthenticated:
            # DRF marks the request unauthenticated only when its own exceptions are raised; do
            # the same for ours (as DRF would), or whoever reads request.user next (the exception
            # handler, logging) would authenticate again and fail again.
            anonymous = api_settings.UNAUTHENTICATED_USER
            request.user, request.auth = (anonymous() if anonymous else None), None
            raise
        assert credential is not None  # a scheme came with a token or a problem
        return credential.user, credential


class BearerTokenAuthentication(_TokenAuthentication):
    """``Authorization: Bearer <token>``."""

    scheme = BEARER

    def authenticate_header(self, request: Request) -> str:
        return BEARER_CHALLENGE


class TokenBasicAuthentication(_TokenAuthentication):
    """HTTP Basic with any user name and the token as the password."""

    scheme = BASIC

    def authenticate_header(self, request: Request) -> str:
        return BASIC_CHALLENGE
