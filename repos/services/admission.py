"""Admission: who a request is, whether it may do what it asks, and whether its bucket allows it.

One :class:`Admission` per request, made from what the request presented — ``Authorization:
Bearer <token>``, HTTP Basic with the token as the password (what git sends; the user name is
ignored), or, on a WebSocket, ``?token=`` (browsers cannot set headers there). The ASGI
middleware (agentgit_site/guards.py) makes it for every request and passes it down in the scope;
each surface — REST views, the event feeds, and whatever is mounted later — then calls
:meth:`Admission.admit` with the scope it needs::

    credential = admission.admit("read")   # Unauthenticated, Forbidden or RateLimited

which authenticates (once per request, however many times it is asked), checks the scope, and
only then takes a token from the credential's bucket (repos.services.ratelimit), so a request
refused as unauthenticated or forbidden takes none. The token lookup runs in the thread of
whoever first asks: for a REST view that is the request's own thread, so admission adds no
thread hop to the request (docs/adr/0004).
"""

from __future__ import annotations

import base64

from ..errors import RateLimited, Unauthenticated
from ..models import Credential
from . import ratelimit
from .credentials import authenticate_token, kept_credential, require_scope

#: The schemes a request can present a token with.
BEARER, BASIC, QUERY = "bearer", "basic", "query"
#: Where the ASGI middleware puts a request's Admission in the scope (agentgit_site/guards.py).
SCOPE_KEY = "agentgit.admission"
REALM = "agentgit"
#: The WWW-Authenticate challenge of a 401 for API clients.
BEARER_CHALLENGE = f'Bearer realm="{REALM}"'
#: The challenge git clients understand (they answer it with the token as the password).
BASIC_CHALLENGE = f'Basic realm="{REALM}", charset="UTF-8"'
#: Sent when no credential came with the request.
NO_CREDENTIAL = "authentication required: send 'Authorization: Bearer <token>'"


class Admission:
    """What one request presented, authenticated at most once, admitted (or refused) at most once."""

    def __init__(self, scheme: str | None = None, token: str | None = None, problem: str | None = None) -> None:
        #: How the token came: BEARER, BASIC, QUERY, or None (nothing this server reads).
        self.scheme = scheme
        self._token = token
        self._outcome: Credential | Unauthenticated | None = Unauthenticated(problem) if problem else None
        self._admitted = False
        #: The bucket's refusal, kept: asked again (the hot-read lane hands a refused read on to
        #: Django, which asks again), the request is refused again, not charged or counted twice.
        self._refused: RateLimited | None = None

    @classmethod
    def presented(cls, authorization: str | bytes | None, query_token: str | None = None) -> Admission:
        """From the ``Authorization`` header's value and (WebSocket only) the ``?token=`` value,
        which wins when both are there."""
        if query_token:
            return cls(QUERY, query_token)
        if isinstance(authorization, bytes):
            authorization = authorization.decode("latin-1")
        words = (authorization or "").split()
        if not words or words[0].lower() not in (BEARER, BASIC):
            return cls()  # nothing, or a scheme of someone else's: not authenticated by us
        scheme, rest = words[0].lower(), words[1:]
        try:
            return cls(scheme, _bearer_token(rest) if scheme == BEARER else _basic_token(rest))
        except Unauthenticated as malformed:
            return cls(scheme, problem=malformed.message)

    def credential(self) -> Credential | None:
        """The live credential presented; None if none was; Unauthenticated if the token is
        malformed, unknown or revoked. Looked up once, on the first call."""
        if self._outcome is None and self._token is not None:
            try:
                self._outcome = authenticate_token(self._token)
            except Unauthenticated as refused:
                self._outcome = refused
        if isinstance(self._outcome, Unauthenticated):
            raise self._outcome
        return self._outcome

    def admit(self, scope: str, *alternatives: str) -> Credential:
        """The credential, if it has ``scope`` (or one of the ``alternatives``: a git push needs
        ``write`` or ``integrate``) and its bucket has a token (taken once per request).

        Raises Unauthenticated (nothing presented, or a bad token), Forbidden (the scope is
        missing) or RateLimited (the bucket is empty; with the wait), in that order.
        """
        credential = self.credential()
        if credential is None:
            raise Unauthenticated(NO_CREDENTIAL)
        if not any(credential.has_scope(other) for other in alternatives):
            require_scope(credential, scope)
        if self._refused is not None:
            raise self._refused
        if not self._admitted:
            try:
                ratelimit.take(credential)
            except RateLimited as refused:
                self._refused = refused
                raise
            self._admitted = True
        return credential

    def admitted_at_once(self, scope: str) -> Credential | None:
        """:meth:`admit`'s credential when admitting needs no database, network or wait (a
        credential kept in memory, its scope, a token from the mapped bucket), for the event
        loop; then the request counts as admitted. None: nothing was decided or charged, call
        :meth:`admit` (in a thread), which decides as always."""
        if self._outcome is not None or self._token is None or self._refused is not None:
            return None  # already asked: admit() knows
        credential = kept_credential(self._token)
        if credential is None or not credential.has_scope(scope) or not ratelimit.took_at_once(credential):
            return None
        self._outcome, self._admitted = credential, True
        return credential


def admission_of(request) -> Admission:
    """A Django (or DRF) request's Admission: the middleware's, from the ASGI scope; else, for a
    request that did not come through it (Django's test client, WSGI), one made from the
    request's own headers. The same one for every later call on the request."""
    django_request = getattr(request, "_request", request)  # DRF wraps Django's request
    made = getattr(django_request, "agentgit_admission", None)
    if made is None:
        made = getattr(django_request, "scope", {}).get(SCOPE_KEY)
        if made is None:
            made = Admission.presented(django_request.META.get("HTTP_AUTHORIZATION"))
        django_request.agentgit_admission = made
    return made


def _bearer_token(words: list[str]) -> str:
    if len(words) != 1:
        raise Unauthenticated("malformed Authorization header: expected 'Bearer <token>'")
    if not words[0].isascii():
        raise Unauthenticated("malformed Authorization header: the token is not ASCII")
    return words[0]


def _basic_token(words: list[str]) -> str:
    if len(words) != 1:
        raise Unauthenticated("malformed Authorization header: expected 'Basic <base64 user:token>'")
    try:
        decoded = base64.b64decode(words[0], validate=True).decode("utf-8")
    except ValueError:  # binascii.Error, UnicodeDecodeError, or a non-ASCII header
        raise Unauthenticated("malformed Authorization header: Basic credentials are not base64 of UTF-8") from None
    _user, colon, token = decoded.partition(":")
    if not colon or not token:
        raise Unauthenticated("malformed Authorization header: Basic credentials need the token as the password")
    return token
