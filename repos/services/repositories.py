"""Repositories and streams: creating them, finding them, and resolving a revision."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import cast

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from engine.errors import EngineError, WrongObjectType
from engine.objects import check_object_id, is_object_id

from ..errors import AlreadyExists, ApiError, Invalid, NotFound, from_engine
from ..lookups import Lookup
from ..models import Credential, Repository, Stream
from . import policies, refmirror
from .events import REPOSITORY_CREATED, STREAM_CREATED, append_event, append_events
from .stores import store_for

# A name is checked as the OpenAPI schema describes it (repos/api/schema.py): it matches the
# ``PATTERN`` and no part of it matches the ``FORBIDDEN`` one.

#: Repository names become a directory and a URL segment (/git/{name}.git).
REPOSITORY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
REPOSITORY_NAME_FORBIDDEN = r"\.\.|\.git$"
#: Stream names become git branch names (refs/heads/{name}): git's check-ref-format, simplified
#: to a safe alphabet.
STREAM_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*$"
STREAM_NAME_FORBIDDEN = r"\.\.|\.lock(?:/|$)"
STREAM_NAME_MAX_LENGTH = 200


def _matcher(pattern: str, forbidden: str) -> Callable[[str], bool]:
    # ``$`` in a schema pattern is the end of the text (ECMA-262); in Python it is ``\Z``.
    whole, part = re.compile(pattern.replace("$", r"\Z")), re.compile(forbidden.replace("$", r"\Z"))
    return lambda name: whole.match(name) is not None and part.search(name) is None


_is_repository_name = _matcher(REPOSITORY_NAME_PATTERN, REPOSITORY_NAME_FORBIDDEN)
_is_stream_name = _matcher(STREAM_NAME_PATTERN, STREAM_NAME_FORBIDDEN)


def check_repository_name(name: object) -> str:
    if not isinstance(name, str) or not _is_repository_name(name):
        raise Invalid(
            "a repository name is 1-100 letters, digits, '.', '_' or '-', starts with a letter or digit, "
            f"has no '..' and does not end in '.git': {name!r}"
        )
    return name


def is_stream_name(name: str) -> bool:
    """Whether ``check_stream_name`` takes ``name``."""
    return _is_stream_name(name) and len(name) <= STREAM_NAME_MAX_LENGTH


def check_stream_name(name: object) -> str:
    if not isinstance(name, str) or not _is_stream_name(name) or len(name) > STREAM_NAME_MAX_LENGTH:
        raise Invalid(
            "a stream name is at most 200 characters: segments of letters, digits, '.', '_' or '-' separated "
            f"by '/', each starting with a letter, digit or '_' (no '..', no segment ending in '.lock'): {name!r}"
        )
    return name


def create_repository(name: str, default_stream: str = "main") -> Repository:
    """A new repository with its bare git repository and an empty default stream."""
    check_repository_name(name)
    check_stream_name(default_stream)
    store_for(name)  # the directory exists before any row names it
    try:
        with transaction.atomic():
            repository = Repository.objects.create(name=name, default_stream=default_stream)
            stream = Stream.objects.create(repository=repository, name=repository.default_stream)
            append_event(repository, REPOSITORY_CREATED, {"name": name})
            append_event(repository, STREAM_CREATED, {"stream": stream.name, "head": None})
    except IntegrityError:
        raise AlreadyExists(f"a repository named {name!r} already exists") from None
    refmirror.follow_head(repository)
    return repository


def create_repositories(names: list[str], default_stream: str = "main") -> tuple[list[str], dict[str, str]]:
    """Many new repositories at once, each what :func:`create_repository` makes (its directory,
    its row, its empty default stream, their two events), ``CREATE_BATCH`` per transaction: one
    commit (one fsync of the database) per batch rather than per repository.

    Returns the names created, in the order given, and why each other one was not (an invalid
    name, or one taken already or earlier in ``names``)."""
    check_stream_name(default_stream)
    refused: dict[str, str] = {}
    wanted: list[str] = []
    for name in names:
        try:
            check_repository_name(name)
        except Invalid as error:
            refused[name] = error.message
            continue
        if name in refused or name in wanted:
            refused[name] = f"{name!r} is named twice"
        else:
            wanted.append(name)
    created: list[str] = []
    for start in range(0, len(wanted), CREATE_BATCH):
        batch = wanted[start : start + CREATE_BATCH]
        taken = set(Repository.objects.filter(name__in=batch).values_list("name", flat=True))
        refused.update((name, f"a repository named {name!r} already exists") for name in batch if name in taken)
        batch = [name for name in batch if name not in taken]
        for name in batch:
            store_for(name)  # the directories exist before any row names them
        try:
            with transaction.atomic():
                rows = Repository.objects.bulk_create(Repository(name=n, default_stream=default_stream) for n in batch)
                Stream.objects.bulk_create(Stream(repository=row, name=default_stream) for row in rows)
                for row in rows:
                    append_event(row, REPOSITORY_CREATED, {"name": row.name})
                    append_event(row, STREAM_CREATED, {"stream": default_stream, "head": None})
        except IntegrityError:
            raise AlreadyExists(f"a repository of {batch[0]!r}... was created meanwhile; nothing of them was") from None
        for row in rows:
            refmirror.follow_head(row)
        created += batch
    return created, refused


def list_repositories(names: list[str] | None = None):
    """Every repository, or those of ``names``, by name (a queryset, for paging)."""
    found = Repository.objects.order_by("name")
    return found if names is None else found.filter(name__in=names)


#: Every repository request's lookup (repos.lookups).
_BY_NAME = Lookup(Repository, "name")


def _queryable(*names: object) -> bool:
    # NUL never is in a name, and PostgreSQL refuses it in a query parameter.
    return all(isinstance(name, str) and "\x00" not in name for name in names)


def repository_not_found(name: str) -> NotFound:
    """The one refusal for a repository that does not exist, or that a credential does not
    reach (repos.services.credentials): the two are not told apart."""
    return NotFound(f"no repository named {name!r}")


def get_repository(name: str) -> Repository:
    found = _BY_NAME.get(name) if _queryable(name) else None
    if found is None:
        raise repository_not_found(name)
    return found[0]


_STREAM_BY_NAME = Lookup(Stream, "repository", "name")
#: A stream read's one query: the stream by its repository's name and its own.
_STREAM_BY_NAMES = Lookup(Stream, "repository__name", "name")


def get_stream(repository: Repository, name: str) -> Stream:
    found = _STREAM_BY_NAME.get(repository.pk, name) if _queryable(name) else None
    if found is None:
        raise NotFound(f"no stream named {name!r} in {repository.name}")
    return found[0]


def find_stream(repository_name: str, name: str) -> Stream:
    """``get_stream(get_repository(repository_name), name)`` in one query when both exist (the
    repository is not loaded); the same NotFound when either does not."""
    found = _STREAM_BY_NAMES.get(repository_name, name) if _queryable(repository_name, name) else None
    if found is None:
        return get_stream(get_repository(repository_name), name)  # which one is missing
    return found[0]


def create_stream(repository: Repository, name: str, start: str | None, credential: Credential | None = None) -> Stream:
    """A new stream whose head is the revision ``start`` (None or omitted: empty). Creating a
    stream at a head is a direct update: the policy may refuse it (``policy_denied``)."""
    check_stream_name(name)
    head = resolve_rev(repository, start) if start else None
    if head is not None:
        policies.judge_direct_update(repository, name, None, head, credential)
    # Streams are git branches: "a" and "a/b" cannot both exist (a file and a directory of refs/heads).
    above = Stream.objects.filter(repository=repository, name__in=_enclosing(name)).values_list("name", flat=True)
    taken = above.first() or next(iter(_names_under(repository, [name])), None)
    if taken is not None:
        raise AlreadyExists(f"a stream named {name!r} cannot exist beside {taken!r} (streams are git branches)")
    try:
        with transaction.atomic():
            stream = Stream.objects.create(repository=repository, name=name, head=head)
            append_event(repository, STREAM_CREATED, {"stream": name, "head": head})
    except IntegrityError:
        raise AlreadyExists(f"a stream named {name!r} already exists in {repository.name}") from None
    # Once committed (at once, unless the caller's transaction holds several: an atomic git push).
    transaction.on_commit(lambda: refmirror.follow_stream(repository, name))
    return stream


#: Streams created per transaction by :func:`create_streams`: each statement stays well under
#: the databases' parameter limits, and a transaction holds the repository row's lock (its
#: event sequence) for a few milliseconds at a time, not for the whole push.
CREATE_BATCH = 500


def create_streams(repository: Repository, wanted: list[tuple[str, str]]) -> tuple[list[str], dict[str, str]]:
    """Many new streams at once, each at a changeset (a push of many new branches): what
    :func:`create_stream` does for one, for ``CREATE_BATCH`` of them per transaction with a
    constant number of statements (which exist, which clash, the rows, their events).

    Returns the names created, in the order given, and why each other one was not (a name
    already taken, a clash with an existing name, a head that is not a changeset). Each batch
    commits on its own, so a push's streams appear in order. The ref mirror follows once, for all
    of them (:func:`repos.services.refmirror.follow_streams`), after the last batch commits.
    """
    created: list[str] = []
    refused: dict[str, str] = {}
    commits: dict[str, str | None] = {}  # head -> why it is not a changeset (None: it is)
    for start in range(0, len(wanted), CREATE_BATCH):
        batch = wanted[start : start + CREATE_BATCH]
        for _name, head in batch:
            if head not in commits:
                try:
                    resolve_rev(repository, head)
                    commits[head] = None
                except EngineError as error:
                    commits[head] = from_engine(error).message
                except ApiError as error:
                    commits[head] = error.message
        created += _create_batch(repository, batch, commits, refused)
    transaction.on_commit(lambda: refmirror.follow_streams(repository, created))
    return created, refused


def _create_batch(
    repository: Repository, batch: list[tuple[str, str]], commits: dict[str, str | None], refused: dict[str, str]
) -> list[str]:
    names = [name for name, _head in batch]
    existing = set(Stream.objects.filter(repository=repository, name__in=names).values_list("name", flat=True))
    enclosing = {name: _enclosing(name) for name in names}
    taken_above = set(
        Stream.objects.filter(repository=repository, name__in={e for es in enclosing.values() for e in es}).values_list(
            "name", flat=True
        )
    )
    taken_below = _names_under(repository, names)
    rows: list[Stream] = []
    accepted: set[str] = set()
    directories: dict[str, str] = {}  # a name enclosing an accepted one -> that one
    for name, head in batch:
        clash = next((above for above in enclosing[name] if above in taken_above or above in accepted), None)
        clash = clash or directories.get(name) or next((b for b in taken_below if b.startswith(name + "/")), None)
        if name in existing or name in accepted:
            refused[name] = f"a stream named {name!r} already exists in {repository.name}"
        elif commits[head] is not None:
            refused[name] = str(commits[head])
        elif clash is not None:
            refused[name] = f"a stream named {name!r} cannot exist beside {clash!r} (streams are git branches)"
        else:
            accepted.add(name)
            directories.update((above, name) for above in enclosing[name])
            rows.append(Stream(repository=repository, name=name, head=head))
    with transaction.atomic():
        Stream.objects.bulk_create(rows)
        append_events(repository, STREAM_CREATED, [{"stream": row.name, "head": row.head} for row in rows])
    return [row.name for row in rows]


def _names_under(repository: Repository, names: list[str]) -> list[str]:
    """For each of ``names`` that encloses an existing stream ("a" of "a/b"), one such stream.

    One statement per ``_PROBES`` names, each name its own probe of the ``(repository, name)``
    index (``LIMIT 1`` over the range of names after ``name/``): an OR of the ranges in one
    WHERE was a scan of every stream of the repository on SQLite, per batch."""
    if connection.vendor == "postgresql":
        at_least, below = "~>=~", "~<~"  # byte order, as varchar_pattern_ops indexes it (0003)
    else:
        at_least, below = ">=", "<"  # SQLite's BINARY collation: byte order
    probe = (
        f"SELECT * FROM (SELECT name FROM {Stream._meta.db_table} WHERE repository_id = %s "
        f"AND name {at_least} %s AND name {below} %s ORDER BY name LIMIT 1) AS probe{{n}}"
    )
    found: list[str] = []
    with connection.cursor() as cursor:
        for start in range(0, len(names), _PROBES):
            chunk = names[start : start + _PROBES]
            # Stream names are ASCII below 0x7f (check_stream_name): "name/" to "name/\x7f" is
            # every name under it.
            cursor.execute(
                " UNION ALL ".join(probe.format(n=n) for n in range(len(chunk))),
                [value for name in chunk for value in (repository.pk, name + "/", name + "/\x7f")],
            )
            found += [name for (name,) in cursor.fetchall()]
    return found


#: Probes per statement: SQLite takes at most 500 terms in a compound SELECT.
_PROBES = 250


def _enclosing(name: str) -> list[str]:
    """The names that would be directories of ``name`` as a git ref: "a" and "a/b" of "a/b/c"."""
    return ["/".join(name.split("/")[:cut]) for cut in range(1, name.count("/") + 1)]


def resolve_rev(repository: Repository, rev: str) -> str:
    """The changeset a revision names: a full commit id (which must exist) or a stream's head."""
    if is_object_id(rev):
        try:
            store_for(repository.name).read_commit(check_object_id(rev))
        except WrongObjectType:
            raise NotFound(f"{rev} is not a changeset in {repository.name}") from None
        return rev
    if not isinstance(rev, str) or not rev:
        raise Invalid(f"a revision is a 40-hex changeset id or a stream name, not {rev!r}")
    stream = get_stream(repository, rev)
    if stream.head is None:
        raise NotFound(f"stream {rev!r} is empty")
    return stream.head


def split_rev_path(repository: Repository, rev_and_path: str) -> tuple[str, str]:
    """Split ``{rev}/{path}`` where both may contain '/' (URLs of files and blame).

    A 40-hex first segment is a changeset id; otherwise the longest existing stream name that
    prefixes the string wins. With none, the first segment is taken (resolving it then says
    which stream is unknown).
    """
    segments = rev_and_path.split("/")
    if is_object_id(segments[0]):
        return segments[0], "/".join(segments[1:])
    prefixes = ["/".join(segments[:cut]) for cut in range(1, len(segments))]
    names = set(repository.streams.filter(name__in=prefixes).values_list("name", flat=True))
    for cut in range(len(segments) - 1, 0, -1):
        if "/".join(segments[:cut]) in names:
            return "/".join(segments[:cut]), "/".join(segments[cut:])
    return segments[0], "/".join(segments[1:])


def streams_by_prefix(repository: Repository, prefixes: list[str] | None) -> list[tuple[str, str]]:
    """``(name, head)`` of the non-empty streams whose name starts with one of ``prefixes`` (None:
    every stream), by name: each prefix a range of the ``(repository, name)`` index (git's
    ``ls-refs ref-prefix``, pushed down rather than filtering every stream afterwards).

    The ranges are one ``UNION ALL``, not an ``OR`` in one ``WHERE``: for an ``OR`` of ranges
    SQLite searches the index by repository alone unless ``ANALYZE`` has run, a scan of every
    stream (189 ms for ``git fetch URL refs/heads/<one>`` at a million streams, 14.7 at 1 000;
    git asks with two ``refs/heads/`` prefixes there). A prefix that another one covers is
    dropped, so the ranges are disjoint and no row comes twice."""
    streams = Stream.objects.filter(repository=repository, head__isnull=False)
    if prefixes is not None:
        outermost = sorted({p for p in prefixes if not any(p != q and p.startswith(q) for q in prefixes)})
        if not outermost:
            return []
        parts = [streams.filter(_name_prefix(prefix)).order_by().values_list("name", "head") for prefix in outermost]
        query = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]
        # Non-empty streams only (head__isnull=False), so every head is a str.
        return cast(list[tuple[str, str]], list(query.order_by("name")))
    return cast(list[tuple[str, str]], list(streams.order_by("name").values_list("name", "head")))


def stream_heads(repository: Repository) -> set[str]:
    """The distinct heads of the repository's streams: everything they reach is complete."""
    heads = Stream.objects.filter(repository=repository, head__isnull=False).values_list("head", flat=True)
    # No ordering: the default one (by name) would make DISTINCT return every stream's row.
    return cast(set[str], set(heads.order_by().distinct()))


def _name_prefix(prefix: str) -> Q:
    if not prefix:
        return Q()
    if connection.vendor == "postgresql":
        # LIKE 'prefix%' is case-sensitive here and uses the varchar_pattern_ops index (0003).
        return Q(name__startswith=prefix)
    # SQLite's LIKE ignores case and skips the index; a range under the BINARY collation is
    # exact: stream names are ASCII below 0x7f (check_stream_name).
    return Q(name__gte=prefix, name__lt=prefix + "\x7f")
