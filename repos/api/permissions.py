"""What a credential may do: the scope each request needs, and its rate limit.

Every API request needs a live credential with the scope its method asks for:

    GET, HEAD, OPTIONS            read
    POST, PUT, PATCH, DELETE      write      (blobs, changesets, proposals, streams)
    POST .../integrate            integrate  (the view says so: ``scopes = {"POST": "integrate"}``)
    POST /repos                   admin      (likewise)

``admin`` implies every scope (``Credential.has_scope``). A view overrides the default per method
with a ``scopes`` mapping. Then the request takes a token from its credential's bucket
(:class:`CredentialRateLimit`, repos.services.ratelimit) or is refused with ``rate_limited``.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.throttling import BaseThrottle

from ..errors import Unauthenticated
from ..services import ratelimit
from ..services.credentials import require_scope

#: Sent when no credential came with the request.
NO_CREDENTIAL = "authentication required: send 'Authorization: Bearer <token>'"


def required_scope(method: str, view: object) -> str:
    """The scope ``method`` needs on ``view``."""
    explicit = getattr(view, "scopes", {}).get(method.upper())
    if explicit:
        return explicit
    return "read" if method.upper() in SAFE_METHODS else "write"


class HasScope(BasePermission):
    """A credential authenticated the request, and it has the scope the method needs."""

    def has_permission(self, request, view) -> bool:
        if request.auth is None:
            raise Unauthenticated(NO_CREDENTIAL)
        require_scope(request.auth, required_scope(request.method, view))
        return True


class CredentialRateLimit(BaseThrottle):
    """DRF throttle: the request's credential takes a token or the request is refused (429).

    DRF checks throttles after authentication and permissions, so only requests that would be
    served count against a bucket.
    """

    def allow_request(self, request, view) -> bool:
        if request.auth is not None:
            ratelimit.take(request.auth)  # raises RateLimited, with its retry hint
        return True
