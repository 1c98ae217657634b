"""Derived data for reads: the commit graph and the path index, kept in the database.

For every changeset a stream head reaches, the derive pass records its graph node (generation,
parents, committer time: :class:`CommitNode`) and the paths whose entry it changes against its
first parent (:class:`PathChange`, engine.history.derive). It runs inside the transaction that
lands a head (repos.services.integration), so the data commits with the head or not at all and
a crash leaves nothing to finish. What a landing does not derive — a history too long to derive
inside a landing, data from before this table existed — :func:`derive_missing` derives, in
chunks of its own transactions, at worker start, on the beat schedule and right after such a
landing.

Each process keeps what it has read per repository and afterwards reads only rows it has not
seen (:func:`refresh`): graph nodes seed the engine's graph memo (engine.graph.remember_nodes), so a cold process
answers ancestry and merge-base questions without reading every commit of the history, and
``log?path=`` gets a :class:`engine.history.PathIndex` that answers from the database.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef

from engine.graph import GraphNode, graph_node, remember_nodes
from engine.history import DerivedCommit, derive, path_key
from engine.objects import ObjectId
from engine.store import ObjectStore

from ..lookups import InsertMany, Rows
from ..models import CommitNode, PathChange, Repository, Stream
from .stores import store_for

logger = logging.getLogger(__name__)

#: A landing derives at most this many changesets in its own transaction; a head that reaches
#: more underived history is left to :func:`derive_missing` (a landing stays short).
MAX_DERIVED_IN_LANDING = 1_000
#: :func:`derive_missing` commits every this many changesets, parents first.
DERIVE_CHUNK = 1_000
#: Rows per query of the path index; an answer always holds whole generations.
INDEX_WINDOW = 512


@dataclass
class Known:
    """What this process has read of one repository's derived data."""

    last_id: int = 0
    derived: set[ObjectId] = field(default_factory=set)
    covered: set[ObjectId] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


# Keyed by the repository's identity: a repository deleted and created again under the same
# name (or id, in a test database rolled back) must not inherit the old one's knowledge.
_known: dict[tuple[int, datetime], Known] = {}
_known_lock = threading.Lock()


def _known_for(repository: Repository) -> Known:
    key = (repository.pk, repository.created)
    known = _known.get(key)
    if known is None:
        with _known_lock:
            known = _known.setdefault(key, Known())
    return known


def refresh(repository: Repository, store: ObjectStore | None = None, known: Known | None = None) -> Known:
    """Read the derived rows of ``repository`` this process has not seen yet (one query).

    Rows are only ever added; if the last row this process read is gone (the data was
    rebuilt, a backup restored) it forgets what it knew and reads everything again. A given
    ``known`` (a fresh one: what a new process would read) is filled instead of the process's.
    """
    store = store if store is not None else store_for(repository.name)
    known = known if known is not None else _known_for(repository)
    with known.lock:
        rows = _rows_from(repository, known.last_id)
        # Gone: the last row read, or (none read yet) every row of what this process derived.
        if (not rows and known.derived) or (known.last_id and rows and rows[0][0] != known.last_id):
            known.derived.clear()
            known.covered.clear()
            known.last_id = 0
            rows = _rows_from(repository, 0)
        # The nodes first: whoever sees a changeset in ``known`` finds its node in the store.
        remember_nodes(store, ((row[1], GraphNode(row[2], tuple(row[3].split()), row[4])) for row in rows))
        for row_id, oid, _generation, _parents, _time, indexed in rows:
            known.derived.add(oid)
            if indexed:
                known.covered.add(oid)
            known.last_id = row_id
    return known


def known_at(repository: Repository, store: ObjectStore, head: ObjectId | None) -> Known:
    """This process's view for a landing on ``head``: refreshed (one query) unless it
    knows ``head`` already (it derived or read it: rows are only ever added, and a known
    changeset's ancestors are known too), so a landing on what this process landed last reads
    nothing. What other processes derived meanwhile is read by the next refresh; until then an
    ancestry question about it reads objects (the engine's memo) instead of rows."""
    known = _known_for(repository)
    if head is not None and head in known.derived:
        return known
    return refresh(repository, store, known)


def _rows_from(repository: Repository, row_id: int) -> list[list]:
    """The node rows from ``row_id`` on (inclusive: the caller checks it is still there)."""
    _using, rows = _NODES_FROM.all(repository.pk, row_id, model=CommitNode)
    return rows


#: Every landing's first read (repos/lookups.py: compiled once).
_NODES_FROM = Rows(
    lambda repository, row_id: (
        CommitNode.objects.filter(repository=repository, id__gte=row_id)
        .order_by("id")
        .values_list("id", "commit_id", "generation", "parents", "time", "indexed")
    ),
    int,
    int,
)


def path_index(repository: Repository, store: ObjectStore, known: Known | None = None) -> DatabasePathIndex:
    """The path index of ``repository`` for one read, after reading the rows not seen yet."""
    return DatabasePathIndex(repository, refresh(repository, store, known))


class DatabasePathIndex:
    """:class:`engine.history.PathIndex` over :class:`PathChange`, for one log walk."""

    def __init__(self, repository: Repository, known: Known) -> None:
        self._repository = repository
        self._covered = known.covered

    def covers(self, oid: ObjectId) -> bool:
        return oid in self._covered

    def changed(self, key: int, below: int) -> tuple[list[ObjectId], int]:
        rows = list(
            PathChange.objects.filter(repository=self._repository, key=key, generation__lt=below)
            .order_by("-generation")
            .values_list("generation", "commit_id")[: INDEX_WINDOW + 1]
        )
        if len(rows) <= INDEX_WINDOW:
            return [oid for _, oid in rows], 0
        if rows[0][0] == rows[-1][0]:  # one generation fills the window: take all of it
            generation = rows[0][0]
            whole = PathChange.objects.filter(repository=self._repository, key=key, generation=generation)
            return list(whole.values_list("commit_id", flat=True)), generation
        floor = rows[-1][0] + 1  # the last generation may be cut short: leave it to the next window
        return [oid for generation, oid in rows if generation >= floor], floor


def derive_landed(repository: Repository, store: ObjectStore, head: ObjectId, known: Known) -> bool:
    """Record the derived data of a head being landed, in the caller's transaction.

    ``known`` is this process's view, refreshed at the start of the landing. Returns False
    (nothing written) when the head reaches more than :data:`MAX_DERIVED_IN_LANDING`
    underived changesets: :func:`derive_missing` is then due.
    """
    derived = derive(store, head, known.derived.__contains__, max_commits=MAX_DERIVED_IN_LANDING)
    if derived is None:
        return False
    _insert(repository, derived)
    # Once committed, this process knows them without reading them back (known_at).
    transaction.on_commit(lambda: _learn(store, known, derived))
    return True


def _learn(store: ObjectStore, known: Known, commits: list[DerivedCommit]) -> None:
    """Add what this process derived (and committed) to its view, nodes first (as refresh)."""
    remember_nodes(
        store, ((commit.id, GraphNode(commit.generation, commit.parents, commit.time)) for commit in commits)
    )
    with known.lock:
        for commit in commits:
            known.derived.add(commit.id)
            if commit.changed is not None:
                known.covered.add(commit.id)


def derive_recorded(
    repository: Repository,
    store: ObjectStore,
    commits: list[tuple[ObjectId, tuple[ObjectId, ...], int, set[str] | None]],
) -> None:
    """Record, in the caller's transaction, the derived data of commits recorded from git
    whose changed paths git gave (``(id, parents, committer time, changed paths or None past
    the limit)``, parents first: repos.services.content.record_commits): the rows
    :func:`engine.history.derive` would write, without reading a tree.

    A derived changeset's ancestors must all be derived (the walks stop at one), so a commit
    with a parent that is neither derived nor among ``commits`` is left, with what descends
    from it here, to :func:`derive_missing`.
    """
    known = refresh(repository, store)
    generations: dict[ObjectId, int] = {}
    out = []
    for oid, parents, time, paths in commits:
        if oid in known.derived:
            continue
        if not all(parent in generations or parent in known.derived for parent in parents):
            continue
        generation = 1 + max(
            (generations[p] if p in generations else graph_node(store, p).generation for p in parents), default=0
        )
        generations[oid] = generation
        changed = None if paths is None else frozenset(path_key(path) for path in paths)
        out.append(DerivedCommit(oid, generation, parents, time, changed))
    _insert(repository, out)
    transaction.on_commit(lambda: _learn(store, known, out))


def derive_missing(
    progress: Callable[[str, int, int], None] | None = None, in_repository: Repository | None = None
) -> int:
    """Derive every stream head's underived history (of ``in_repository``'s streams, or all),
    parents first, a chunk per transaction.

    Idempotent, and safe beside landings and other processes doing the same: rows already
    there are left as they are. ``progress(stream, done, total)`` follows a long history.
    Returns how many changesets were derived.
    """
    total = 0
    has_node = CommitNode.objects.filter(repository=OuterRef("repository"), commit_id=OuterRef("head"))
    streams = Stream.objects.filter(head__isnull=False)
    if in_repository is not None:
        streams = streams.filter(repository=in_repository)
    underived = streams.exclude(Exists(has_node)).select_related("repository").order_by("repository_id", "id")
    for stream in underived:
        repository = stream.repository
        store = store_for(repository.name)
        known = refresh(repository, store)
        head = stream.head
        if head is None or head in known.derived:  # (the query leaves out streams without a head)
            continue
        name = f"{repository.name}:{stream.name}"
        on_progress = None if progress is None else (lambda done, total: progress(name, done, total))  # noqa: B023 (called in this iteration)
        # None only past max_commits, which this pass does not set.
        derived = derive(store, head, known.derived.__contains__, progress=on_progress) or []
        for start in range(0, len(derived), DERIVE_CHUNK):
            with transaction.atomic():
                _insert(repository, derived[start : start + DERIVE_CHUNK])
        total += len(derived)
        refresh(repository, store)
        if derived:
            logger.info("derived %d changesets of %s", len(derived), name)
    return total


def _insert(repository: Repository, derived: list[DerivedCommit]) -> None:
    """Write nodes and path rows (both or neither: the caller's transaction), skipping rows
    another process wrote first."""
    if not derived:
        return
    _INSERT_NODES.run(
        [
            CommitNode(
                repository=repository,
                commit_id=commit.id,
                generation=commit.generation,
                parents=" ".join(commit.parents),
                time=commit.time,
                indexed=commit.changed is not None,
            )
            for commit in derived
        ]
    )
    _INSERT_PATHS.run(
        [
            PathChange(repository=repository, key=key, generation=commit.generation, commit_id=commit.id)
            for commit in derived
            for key in commit.changed or ()
        ]
    )


_INSERT_NODES = InsertMany(CommitNode)
_INSERT_PATHS = InsertMany(PathChange)
