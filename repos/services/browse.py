"""Reads the web UI needs beyond the API's answers (``reads``): entries, file changes with their
blobs, commit descriptions, merge bases, path search, streams and recent events.

Every function takes a repository the caller has already checked access to, reads through the
repository's object store, and makes a fixed number of queries whatever the size of the history
or of the tree (the page benchmark reports them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from engine.errors import EngineError
from engine.graph import merge_bases
from engine.objects import MODE_TREE, Entry, check_object_id, is_object_id, split_path
from engine.renames import diff_with_renames
from engine.trees import FileChange, iter_files, lookup

from ..errors import NotFound, from_engine
from ..models import Changeset, Credential, Event, Proposal, Repository, Stream
from . import reads, repositories
from .repositories import resolve_rev
from .stores import store_for


@dataclass(frozen=True)
class CommitInfo:
    """What a page shows of a changeset: its commit, and what AgentGit recorded beside it."""

    id: str
    parents: tuple[str, ...]
    tree: str
    message: str
    author_name: str
    author_email: str
    #: Committer time, seconds since the epoch.
    time: int
    provenance: dict = field(default_factory=dict)
    #: The credential that wrote it ("name (agt_xxxx…)"), when AgentGit recorded one.
    credential: str = ""
    credential_user: str = ""

    @property
    def summary(self) -> str:
        return self.message.strip().splitlines()[0] if self.message.strip() else ""

    @property
    def agent(self) -> str:
        agent = self.provenance.get("agent")
        return agent if isinstance(agent, str) and agent else self.author_name


#: Blames kept per process: (repository, changeset, path) -> lines. A changeset's blame never
#: changes, and computing one walks every change of the file (hundreds of milliseconds for a
#: long-edited file), so a page viewed again, or its neighbour's "blame the parent", is free.
BLAME_CACHE_ENTRIES = 64
_blames: OrderedDict[tuple[str, str, str], list[dict]] = OrderedDict()
_blames_lock = threading.Lock()


def blame(repository: Repository, commit_id: str, path: str) -> list[dict]:
    """``reads.blame`` at a changeset id, remembered for the next page that asks."""
    key = (repository.name, commit_id, path)
    with _blames_lock:
        found = _blames.get(key)
        if found is not None:
            _blames.move_to_end(key)
            return found
    lines = reads.blame(repository, commit_id, path)
    with _blames_lock:
        _blames[key] = lines
        while len(_blames) > BLAME_CACHE_ENTRIES:
            _blames.popitem(last=False)
    return lines


def resolve(repository: Repository, rev: str) -> str:
    """The changeset id ``rev`` names (an id or a stream name); NotFound or Invalid otherwise."""
    return resolve_rev(repository, rev)


def split_rev_path(repository: Repository, rest: str) -> tuple[str, str]:
    """``<rev>/<path>`` or ``<rev>`` alone (a stream name may hold '/') → ``(rev, path)``."""
    rest = rest.strip("/")
    if is_object_id(rest) or Stream.objects.filter(repository=repository, name=rest).exists():
        return rest, ""
    return repositories.split_rev_path(repository, rest)


def entry_at(repository: Repository, commit_id: str, path: str) -> Entry | None:
    """The entry at ``path`` in the changeset (the root tree for an empty path), or None."""
    store = store_for(repository.name)
    tree = store.read_commit(commit_id).tree
    if not path:
        return Entry(MODE_TREE, tree)
    try:
        return lookup(store, tree, path)
    except EngineError as error:
        raise from_engine(error) from None


def read_blob(repository: Repository, oid: str) -> bytes:
    return store_for(repository.name).read_blob(oid)


def blob_reader(repository: Repository) -> Callable[[str], bytes]:
    """``read(blob id) -> bytes`` for many blobs of one repository (a diff's)."""
    return store_for(repository.name).read_blob


def describe(repository: Repository, ids: Iterable[str]) -> dict[str, CommitInfo]:
    """The commits ``ids`` described, with their provenance: one query for any number of them,
    and one more for the credentials that wrote them, if any did (an import's wrote none)."""
    store = store_for(repository.name)
    wanted = list(dict.fromkeys(ids))
    # Only what a description shows beside the commit (the rest is the commit's own), as plain
    # values: the operation lists are up to a megabyte each, and a model instance per row was
    # most of the query's time on a page of fifty.
    recorded = {
        commit_id: (provenance, credential_id)
        for commit_id, provenance, credential_id in Changeset.objects.filter(
            repository=repository, commit_id__in=wanted
        ).values_list("commit_id", "provenance", "credential_id")
    }
    used = {credential_id for _, credential_id in recorded.values() if credential_id is not None}
    credentials = {row.pk: row for row in Credential.objects.filter(pk__in=used).select_related("user")} if used else {}
    out = {}
    for oid in wanted:
        commit = store.read_commit(oid)
        provenance, credential_id = recorded.get(oid, ({}, None))
        credential = credentials.get(credential_id) if credential_id is not None else None
        out[oid] = CommitInfo(
            id=oid,
            parents=commit.parents,
            tree=commit.tree,
            message=commit.message,
            author_name=commit.author.name,
            author_email=commit.author.email,
            time=commit.committer.time,
            provenance=provenance if isinstance(provenance, dict) else {},
            credential=str(credential) if credential is not None else "",
            credential_user=credential.user.get_username() if credential is not None else "",
        )
    return out


def changes(repository: Repository, old_commit: str | None, new_commit: str) -> list[FileChange]:
    """The files that differ between two changesets (``None``: the empty tree), renames detected."""
    store = store_for(repository.name)
    old_tree = store.read_commit(old_commit).tree if old_commit else None
    return diff_with_renames(store, old_tree, store.read_commit(new_commit).tree)


def merge_base(repository: Repository, a: str, b: str) -> str | None:
    """One best common ancestor of two changesets, or None when their histories are unrelated."""
    bases = merge_bases(store_for(repository.name), a, b)
    return bases[0] if bases else None


def find_files(repository: Repository, commit_id: str, query: str, limit: int) -> tuple[list[str], bool]:
    """Paths of files at ``commit_id`` containing every word of ``query`` (case-insensitive),
    in path order: at most ``limit``, and whether there were more. Walks the whole tree."""
    words = [word.lower() for word in query.split() if word]
    store = store_for(repository.name)
    found: list[str] = []
    for path, _entry in iter_files(store, store.read_commit(commit_id).tree):
        lowered = path.lower()
        if all(word in lowered for word in words):
            if len(found) == limit:
                return found, True
            found.append(path)
    return found, False


def check_path(path: str) -> str:
    """``path`` if it is a safe repository path ('' for the root); Invalid otherwise."""
    if path:
        try:
            split_path(path)
        except EngineError as error:
            raise from_engine(error) from None
    return path


#: How many streams besides the default one a page names (the repository's list, the stream
#: switchers and filters): a repository may hold a million, which the API pages through and
#: git lists, and a page of them all would cost what they number.
STREAMS_SHOWN = 50


def streams(repository: Repository, limit: int = STREAMS_SHOWN) -> list[Stream]:
    """The default stream first, then the first ``limit`` others by name: two index ranges,
    whatever the number of streams."""
    mine = Stream.objects.filter(repository=repository)
    default = list(mine.filter(name=repository.default_stream))
    return default + list(mine.exclude(name=repository.default_stream).order_by("name")[:limit])


def recent_events(repository: Repository, kinds: Iterable[str] | None = None, limit: int = 50) -> list[Event]:
    """The newest events of the repository (of ``kinds``), newest first."""
    events = Event.objects.filter(repository=repository)
    if kinds is not None:
        events = events.filter(kind__in=list(kinds))
    return list(events.order_by("-seq")[:limit])


def proposal_titles(repository: Repository, numbers: Iterable[int]) -> dict[int, str]:
    """The titles of the proposals ``numbers``: one query."""
    return dict(Proposal.objects.filter(repository=repository, pk__in=list(numbers)).values_list("pk", "title"))


def changeset_or_404(repository: Repository, oid: str) -> str:
    """``oid`` if it is a full changeset id of this repository; NotFound otherwise."""
    try:
        check_object_id(oid)
        store_for(repository.name).read_commit(oid)
    except EngineError:
        raise NotFound(f"no changeset {oid} in {repository.name}") from None
    return oid
