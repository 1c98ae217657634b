"""API tokens: create (shown once), authenticate, revoke, and check scopes.

A token is ``agt_`` + 256 random bits. Only its SHA-256 is stored: a request finds its
credential by an index lookup on the hash, and a database leak reveals no usable token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.utils import timezone

from ..errors import Forbidden, Invalid, Unauthenticated
from ..lookups import Lookup
from ..models import Credential

TOKEN_PREFIX = "agt_"
#: How many leading characters of a token are kept in clear, to tell credentials apart.
PREFIX_LENGTH = 12
#: ``last_used`` is a hint for humans, not an audit log: refreshing it at most this often
#: keeps a busy credential's reads from writing a row on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)
#: One message for unknown and revoked tokens, so the answer does not tell them apart.
INVALID_TOKEN = "invalid or revoked token"


def hash_token(token: str) -> str:
    """The SHA-256 hex digest under which a token is stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_scopes(scopes: object) -> list[str]:
    """The scopes, deduplicated in canonical order; Invalid if empty or any is unknown."""
    if isinstance(scopes, str) or not isinstance(scopes, (list, tuple, set, frozenset)):
        raise Invalid(f"scopes are a list of {', '.join(Credential.SCOPES)}, not {scopes!r}")
    unknown = sorted(repr(s) for s in scopes if s not in Credential.SCOPES)
    if unknown:
        raise Invalid(f"unknown scope {', '.join(unknown)}; the scopes are {', '.join(Credential.SCOPES)}")
    if not scopes:
        raise Invalid(f"a credential needs at least one scope of {', '.join(Credential.SCOPES)}")
    return [s for s in Credential.SCOPES if s in scopes]


def create_credential(
    user: AbstractBaseUser,
    scopes: list[str],
    *,
    name: str = "",
    rate: float | None = None,
    burst: int | None = None,
) -> tuple[Credential, str]:
    """Create a credential for ``user`` and return it with its token.

    The token exists only in the return value: show it once, it cannot be recovered.
    """
    scopes = check_scopes(scopes)
    if len(name) > Credential._meta.get_field("name").max_length:
        raise Invalid("a credential name is at most 100 characters")
    if rate is not None and not rate > 0:
        raise Invalid(f"rate is requests per second, more than 0, not {rate!r}")
    if burst is not None and burst < 1:
        raise Invalid(f"burst is a number of requests, at least 1, not {burst!r}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    credential = Credential.objects.create(
        user=user,
        name=name,
        token_hash=hash_token(token),
        token_prefix=token[:PREFIX_LENGTH],
        scopes=scopes,
        rate=rate,
        burst=burst,
    )
    return credential, token


#: Every request's first query (repos.lookups): the credential and the user fields requests use.
_USER_FIELDS = ("is_active", "username", "email")  # email: the author of changesets
_BY_TOKEN_HASH = Lookup(Credential, "token_hash", extra=tuple(f"user__{name}" for name in _USER_FIELDS))


def authenticate_token(token: str) -> Credential:
    """The live credential a token belongs to; Unauthenticated if unknown or revoked.

    Its ``user`` comes with it, with the fields requests use loaded (the others load on access).
    """
    digest = hash_token(token)
    found = _BY_TOKEN_HASH.get(digest)
    # The index lookup already matched the hash; compare_digest makes the final equality
    # check constant-time whatever the database's comparison does.
    if found is None:
        raise Unauthenticated(INVALID_TOKEN)
    credential, user_values = found
    user_fields = dict(zip(_USER_FIELDS, user_values), id=credential.user_id)
    if (
        not hmac.compare_digest(credential.token_hash, digest)
        or credential.revoked is not None
        or not user_fields["is_active"]
    ):
        raise Unauthenticated(INVALID_TOKEN)
    User = Credential._meta.get_field("user").related_model
    loaded = [field.attname for field in User._meta.concrete_fields if field.attname in user_fields]
    credential.user = User.from_db(credential._state.db, loaded, [user_fields[name] for name in loaded])
    _touch(credential)
    return credential


def _touch(credential: Credential) -> None:
    """Record the use, at most once per LAST_USED_RESOLUTION per credential."""
    now = timezone.now()
    stale = now - LAST_USED_RESOLUTION
    # Decide from the row just read first: most requests then issue no UPDATE at all (on
    # SQLite even an UPDATE that matches nothing takes the database's write lock).
    if credential.last_used is not None and credential.last_used >= stale:
        return
    # Conditional, so concurrent requests with the same token write once between them.
    updated = (
        Credential.objects.filter(pk=credential.pk)
        .filter(Q(last_used__isnull=True) | Q(last_used__lt=stale))
        .update(last_used=now)
    )
    if updated:
        credential.last_used = now


def revoke_credential(credential: Credential) -> None:
    """Revoke a credential (from now on its token is refused); revoking twice keeps the first time."""
    if credential.revoked is None:
        credential.revoked = timezone.now()
        Credential.objects.filter(pk=credential.pk, revoked__isnull=True).update(revoked=credential.revoked)


def require_scope(credential: Credential, scope: str) -> None:
    """Forbidden unless the credential has ``scope`` (``admin`` implies every scope)."""
    if scope not in Credential.SCOPES:
        raise ValueError(f"unknown scope {scope!r}")  # a programming error, not a caller's
    if not credential.has_scope(scope):
        raise Forbidden(f"this credential lacks the {scope!r} scope")
