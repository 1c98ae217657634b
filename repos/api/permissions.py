"""Scope checks: every API request needs a live credential with the scope its method asks for.

    GET, HEAD, OPTIONS            read
    POST, PUT, PATCH, DELETE      write      (blobs, changesets, proposals, streams)
    POST .../integrate            integrate  (the view says so: ``scopes = {"POST": "integrate"}``)
    POST /repos                   admin      (likewise)

``admin`` implies every scope (``Credential.has_scope``). A view overrides the default per method
with a ``scopes`` mapping.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from ..errors import Unauthenticated
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
