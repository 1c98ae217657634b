"""API tokens: create (shown once), authenticate, revoke, and check scopes and reach.

A token is ``agt_`` + 256 random bits. Only its SHA-256 is stored: a request finds its
credential by an index lookup on the hash, and a database leak reveals no usable token.

A credential may be held to some repositories, some streams and some paths (its *reach*; an
empty list is no limit, so credentials made before these existed keep what they could do):

* a repository outside ``repositories`` does not exist for it: :func:`require_repository`
  refuses it with the very 404 of a repository that does not exist, on every surface;
* a stream outside ``streams`` (glob patterns, engine.policy) cannot be updated by it:
  :func:`require_stream` refuses with 403 ``forbidden`` naming the stream and the patterns;
* a change to a path outside ``paths`` (gitignore-style patterns) is refused whole:
  :func:`require_paths` answers 403 ``forbidden`` with one detail per path.

The patterns are compiled once per distinct list (a cache keyed on the patterns), not per request.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import NamedTuple

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from engine.errors import InvalidInput
from engine.policy import (
    MAX_NAMED_PATHS,
    PathPatterns,
    StreamPatterns,
    compile_paths,
    compile_streams,
)

# The limits of a credential's reach, re-exported for the API's schema (repos/api: no engine imports).
from engine.policy import MAX_PATTERN_LENGTH as MAX_PATTERN_LENGTH
from engine.policy import MAX_PATTERNS as MAX_PATTERNS

from ..errors import Forbidden, Invalid, Unauthenticated
from ..lookups import Lookup
from ..models import Credential, Proposal
from . import credential_cache
from .repositories import check_repository_name, repository_not_found

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


def user_named(username: str) -> AbstractBaseUser:
    """The user of that name, created without a password (API users log in with tokens) if new."""
    User = get_user_model()
    found = User.objects.filter(username=username).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return User.objects.create_user(username=username)
    except IntegrityError:  # created meanwhile by another request
        return User.objects.get(username=username)


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


#: The most repository names a credential can be held to.
MAX_REPOSITORIES = 1000


class Reach(NamedTuple):
    """Where a credential reaches: repository names, stream patterns, path patterns (each
    empty: no limit)."""

    repositories: list[str]
    streams: list[str]
    paths: list[str]


def check_reach(repositories: object = None, streams: object = None, paths: object = None) -> Reach:
    """The lists as stored (None is empty; repositories deduplicated, in order); Invalid with
    one detail (``field``, ``code``, ``message``) per bad list or entry."""
    problems: list[dict] = []
    names = _names(repositories, problems)
    checked: list[list[str]] = []
    for field_name, value, compile_ in (("streams", streams, compile_streams), ("paths", paths, compile_paths)):
        value = [] if value is None else value
        problems += _pattern_problems(compile_, value, field_name)
        checked.append(list(value) if isinstance(value, list) else [])
    if problems:
        raise Invalid(f"{problems[0]['field']}: {problems[0]['message']}", details=problems)
    return Reach(names, *checked)


def _pattern_problems(compile_: Callable[[object, str], object], value: object, field_name: str) -> list[dict]:
    """The details of the patterns that do not compile, each named by its index."""
    try:
        compile_(value, field_name)
    except InvalidInput as refused:
        return [dict(detail) for detail in refused.details]
    return []


def _names(repositories: object, problems: list[dict]) -> list[str]:
    if repositories is None:
        return []
    if not isinstance(repositories, list):
        problems.append({"field": "repositories", "code": "invalid", "message": "a list of repository names"})
        return []
    if len(repositories) > MAX_REPOSITORIES:
        problems.append({"field": "repositories", "code": "invalid", "message": f"at most {MAX_REPOSITORIES} names"})
    for index, name in enumerate(repositories):
        try:
            check_repository_name(name)
        except Invalid as refused:
            problems.append({"field": f"repositories.{index}", "code": "invalid", "message": refused.message})
    return list(dict.fromkeys(name for name in repositories if isinstance(name, str)))


def create_credential(
    user: AbstractBaseUser,
    scopes: list[str],
    *,
    name: str = "",
    rate: float | None = None,
    burst: int | None = None,
    repositories: object = None,
    streams: object = None,
    paths: object = None,
) -> tuple[Credential, str]:
    """Create a credential for ``user``, held to ``repositories``, ``streams`` and ``paths`` if
    given (:func:`check_reach`), and return it with its token.

    The token exists only in the return value: show it once, it cannot be recovered.
    """
    scopes = check_scopes(scopes)
    reach = check_reach(repositories, streams, paths)
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
        repositories=reach.repositories,
        streams=reach.streams,
        paths=reach.paths,
    )
    return credential, token


#: Every request's first query (repos.lookups): the credential and the user fields requests use.
_USER_FIELDS = ("is_active", "username", "email")  # email: the author of changesets
_BY_TOKEN_HASH = Lookup(Credential, "token_hash", extra=tuple(f"user__{name}" for name in _USER_FIELDS))


def authenticate_token(token: str) -> Credential:
    """The live credential a token belongs to; Unauthenticated if unknown or revoked.

    Its ``user`` comes with it, with the fields requests use loaded (the others load on access).
    Kept in the process while no credential or user changes (repos.services.credential_cache).
    """
    digest = hash_token(token)
    generation = credential_cache.generation()  # before the row is read: see credential_cache
    credential = credential_cache.cached(digest, generation) if generation is not None else None
    if credential is None:
        credential = _look_up(digest)
        if generation is not None:
            credential_cache.keep(digest, generation, credential)
    if _touch(credential):
        credential_cache.touched(digest, credential.last_used)
    return credential


def kept_credential(token: str) -> Credential | None:
    """What :func:`authenticate_token` would answer, when that needs neither the database nor the
    network: the credential kept in this process under the generation read from memory, its
    ``last_used`` not due. None: ask :func:`authenticate_token`."""
    credential = credential_cache.kept_in_memory(hash_token(token))
    if credential is None or _touch_due(credential, timezone.now()):
        return None
    return credential


def _look_up(digest: str) -> Credential:
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
    return credential


def _touch(credential: Credential) -> bool:
    """Record the use, at most once per LAST_USED_RESOLUTION per credential; whether it was due."""
    now = timezone.now()
    # Decide from the row just read first: most requests then issue no UPDATE at all (on
    # SQLite even an UPDATE that matches nothing takes the database's write lock).
    if not _touch_due(credential, now):
        return False
    stale = now - LAST_USED_RESOLUTION
    # Conditional, so concurrent requests with the same token write once between them. When it
    # matched nothing another request wrote a time this recent: ``now`` is as good a hint.
    (
        Credential.objects.filter(pk=credential.pk)
        .filter(Q(last_used__isnull=True) | Q(last_used__lt=stale))
        .update(last_used=now)
    )
    credential.last_used = now
    return True


def _touch_due(credential: Credential, now: datetime) -> bool:
    return credential.last_used is None or credential.last_used < now - LAST_USED_RESOLUTION


def revoke_credential(credential: Credential) -> None:
    """Revoke a credential (from now on its token is refused); revoking twice keeps the first time."""
    if credential.revoked is None:
        credential.revoked = timezone.now()
        Credential.objects.filter(pk=credential.pk, revoked__isnull=True).update(revoked=credential.revoked)
        credential_cache.credentials_changed()  # an UPDATE sends no post_save


def require_scope(credential: Credential, scope: str) -> None:
    """Forbidden unless the credential has ``scope`` (``admin`` implies every scope)."""
    if scope not in Credential.SCOPES:
        raise ValueError(f"unknown scope {scope!r}")  # a programming error, not a caller's
    if not credential.has_scope(scope):
        raise Forbidden(f"this credential lacks the {scope!r} scope")


# ----------------------------------------------------------------------------- reach


def reaches(credential: Credential | None, repository_name: str) -> bool:
    """Whether the credential reaches the repository (None: the server itself, which reaches all)."""
    return credential is None or not credential.repositories or repository_name in credential.repositories


def require_repository(credential: Credential | None, repository_name: str) -> None:
    """NotFound, exactly as for a repository that does not exist, unless the credential reaches it."""
    if not reaches(credential, repository_name):
        raise repository_not_found(repository_name)


def require_stream(credential: Credential | None, stream_name: str) -> None:
    """Forbidden unless the credential may update the stream (create, delete, push to, propose
    onto, integrate into, land on, resolve or revise a proposal of)."""
    if credential is None or not credential.streams:
        return
    if not _stream_patterns(tuple(credential.streams)).matches(stream_name):
        patterns = ", ".join(credential.streams)
        message = f"this credential may not update the stream {stream_name!r}: its streams are {patterns}"
        raise Forbidden(message, details=[{"stream": stream_name, "code": "stream_not_allowed", "message": message}])


def require_proposal_stream(credential: Credential | None, proposal: Proposal) -> None:
    """:func:`require_stream` for the stream a proposal lands on (its row read only when the
    credential is held to some streams: a request of any other pays no query for it)."""
    if credential is not None and credential.streams:
        require_stream(credential, proposal.stream.name)


def require_paths(credential: Credential | None, paths: Iterable[str]) -> None:
    """Forbidden, with one detail per path, unless every path is within the credential's paths."""
    if credential is None or not credential.paths:
        return
    allowed = _path_patterns(tuple(credential.paths))
    refused = sorted({path for path in paths if not allowed.matches(path)})
    if not refused:
        return
    patterns = ", ".join(credential.paths)
    named = ", ".join(refused[:MAX_NAMED_PATHS])
    if len(refused) > MAX_NAMED_PATHS:
        named += f" and {len(refused) - MAX_NAMED_PATHS} more"
    details = [
        {"path": path, "code": "path_not_allowed", "message": f"{path} is outside this credential's paths ({patterns})"}
        for path in refused
    ]
    raise Forbidden(f"this credential may not change {named}: its paths are {patterns}", details=details)


@functools.lru_cache(maxsize=1024)
def _stream_patterns(patterns: tuple[str, ...]) -> StreamPatterns:
    return compile_streams(list(patterns))


@functools.lru_cache(maxsize=1024)
def _path_patterns(patterns: tuple[str, ...]) -> PathPatterns:
    return compile_paths(list(patterns))
