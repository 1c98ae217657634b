"""What a credential may do: the scope each request needs; meeting it admits the request.

Every API request needs a live credential with the scope its method asks for:

    GET, HEAD, OPTIONS            read
    POST, PUT, PATCH, DELETE      write      (blobs, changesets, proposals, streams)
    POST .../integrate            integrate  (the view says so: ``scopes = {"POST": "integrate"}``)
    POST /repos                   admin      (likewise)

``admin`` implies every scope (``Credential.has_scope``). A view overrides the default per method
with a ``scopes`` mapping. A request with the scope is admitted by the request's Admission
(repos.services.admission): it takes a token from its credential's bucket, or is refused with
``rate_limited``. DRF checks permissions after authentication, so unauthenticated and forbidden
requests take no token.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from ..services.admission import admission_of


def required_scope(method: str, view: object) -> str:
    """The scope ``method`` needs on ``view``."""
    explicit = getattr(view, "scopes", {}).get(method.upper())
    if explicit:
        return explicit
    return "read" if method.upper() in SAFE_METHODS else "write"


class HasScope(BasePermission):
    """A credential authenticated the request, it has the scope the method needs, and its
    bucket had a token for it (Unauthenticated, Forbidden or RateLimited otherwise)."""

    def has_permission(self, request, view) -> bool:
        admission_of(request).admit(required_scope(request.method, view))
        return True
