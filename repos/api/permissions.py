"""What a credential may do: the scope each request needs; meeting it admits the request.

Every API request needs a live credential with the scope its method asks for:

    GET, HEAD, OPTIONS            read
    POST, PUT, PATCH, DELETE      write      (blobs, changesets, proposals, streams)
    POST .../integrate            integrate  (the view says so: ``scopes = {"POST": "integrate"}``)
    POST /repos                   admin      (likewise)

``admin`` implies every scope (``Credential.has_scope``). A view overrides the default per method
with a ``scopes`` mapping. A credential held to some repositories (repos.services.credentials)
is answered 404 ``not_found`` for any other named in the URL (``{repo}``), as if it did not
exist, by :func:`admit`: here for every view, and in the hot-read lane (:mod:`.hot`) for the
reads it answers itself. A request with the scope is admitted by the request's Admission
(repos.services.admission): it takes a token from its credential's bucket, or is refused with
``rate_limited``. DRF checks permissions after authentication, so unauthenticated and forbidden
requests take no token.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from ..models import Credential
from ..services.admission import Admission, admission_of
from ..services.credentials import require_repository


def required_scope(method: str, view: object) -> str:
    """The scope ``method`` needs on ``view``."""
    explicit = getattr(view, "scopes", {}).get(method.upper())
    if explicit:
        return explicit
    return "read" if method.upper() in SAFE_METHODS else "write"


def admit(admission: Admission, scope: str, url_kwargs: dict) -> Credential:
    """The request's credential, admitted for ``scope``, if it reaches the URL's repository."""
    credential = admission.admit(scope)
    if "repo" in url_kwargs:
        require_repository(credential, url_kwargs["repo"])
    return credential


class HasScope(BasePermission):
    """A credential authenticated the request, it has the scope the method needs, its bucket
    had a token for it, and it reaches the URL's repository (Unauthenticated, Forbidden,
    RateLimited or NotFound otherwise)."""

    def has_permission(self, request, view) -> bool:
        admit(admission_of(request), required_scope(request.method, view), view.kwargs)
        return True
