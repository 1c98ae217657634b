"""DRF authentication by API token: ``Authorization: Bearer <token>``, or HTTP Basic with the
token as the password (what git clients send; the user name is ignored).

Both give views ``request.user`` = the credential's user and ``request.auth`` = the Credential.
A bad token raises ``repos.errors.Unauthenticated``, which the API's exception handler turns
into the one JSON error shape with status 401.
"""

from __future__ import annotations

import base64
import binascii

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request
from rest_framework.settings import api_settings

from ..errors import Unauthenticated
from ..models import Credential
from ..services.credentials import authenticate_token

REALM = "agentgit"
#: The WWW-Authenticate challenge of a 401 for API clients.
BEARER_CHALLENGE = f'Bearer realm="{REALM}"'
#: The challenge git clients understand (they answer it with the token as the password).
BASIC_CHALLENGE = f'Basic realm="{REALM}", charset="UTF-8"'


class _TokenAuthentication(BaseAuthentication):
    """Shared flow: parse one Authorization scheme into a token, then authenticate it."""

    scheme: bytes  # lower case

    def authenticate(self, request: Request) -> tuple[object, Credential] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.scheme:
            return None  # not ours: another authenticator (or none) may take it
        try:
            token = self.token_from(parts[1:])
            credential = authenticate_token(token)
        except Unauthenticated:
            # DRF marks the request unauthenticated only when its own exceptions are raised; do
            # the same for ours (as DRF would), or whoever reads request.user next (the exception
            # handler, logging) would authenticate again and fail again.
            anonymous = api_settings.UNAUTHENTICATED_USER
            request.user, request.auth = (anonymous() if anonymous else None), None
            raise
        return credential.user, credential

    def token_from(self, credentials: list[bytes]) -> str:
        """The token in the header's words after the scheme; Unauthenticated if malformed."""
        raise NotImplementedError


class BearerTokenAuthentication(_TokenAuthentication):
    """``Authorization: Bearer <token>``."""

    scheme = b"bearer"

    def token_from(self, credentials: list[bytes]) -> str:
        if len(credentials) != 1:
            raise Unauthenticated("malformed Authorization header: expected 'Bearer <token>'")
        try:
            return credentials[0].decode("ascii")
        except UnicodeDecodeError:
            raise Unauthenticated("malformed Authorization header: the token is not ASCII") from None

    def authenticate_header(self, request: Request) -> str:
        return BEARER_CHALLENGE


class TokenBasicAuthentication(_TokenAuthentication):
    """HTTP Basic with any user name and the token as the password."""

    scheme = b"basic"

    def token_from(self, credentials: list[bytes]) -> str:
        if len(credentials) != 1:
            raise Unauthenticated("malformed Authorization header: expected 'Basic <base64 user:token>'")
        try:
            decoded = base64.b64decode(credentials[0], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthenticated("malformed Authorization header: Basic credentials are not base64 of UTF-8") from None
        _user, colon, token = decoded.partition(":")
        if not colon or not token:
            raise Unauthenticated("malformed Authorization header: Basic credentials need the token as the password")
        return token

    def authenticate_header(self, request: Request) -> str:
        return BASIC_CHALLENGE
