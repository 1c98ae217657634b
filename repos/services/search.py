"""Code search at any revision (API.md, "Search"; docs/adr/0033).

:func:`search_code` answers the REST endpoint, the MCP tool and the web UI's search box alike:
it resolves the revision, takes the revision's file list (engine.search.FileList: from this
process's cache, from the index's saved lists, derived from the first parent's list along the
changed paths, or by walking the tree), and runs engine.search.search with the repository's
trigram index (engine.search_index) as the candidate source.

The index is derived data kept current by :data:`INDEX_HEAD`, an after-commit job of every
landing (repos.services.integration), which adds the blobs the new head brought and saves its
file list; :func:`index_missing` indexes whatever a repository's heads hold that the index does
not (``agentgit_recover`` asks for it in the background, ``manage.py agentgit_search_index``
runs it with progress). A search never waits for the index: a blob it does not hold is read and
checked, so an answer is exact while indexing lags.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db.models import Max

from engine.errors import EngineError
from engine.search import (
    CONTENT,
    COUNT,
    FILES,
    FileList,
    Matcher,
    PathFilter,
    Position,
    file_changes,
    search,
    search_paths,
)
from engine.search_index import IndexStats, SearchIndex

from ..errors import Invalid, from_engine
from ..models import Repository, Stream
from .dispatch import Job, after_commit
from .repositories import resolve_rev
from .stores import repository_path, store_for

logger = logging.getLogger(__name__)

MODES = (CONTENT, FILES, COUNT)
TARGETS = ("content", "paths")
DEFAULT_LIMIT, MAX_LIMIT = 100, 1000
MAX_CONTEXT = 100
#: File lists kept per process (about 130 bytes a file: 13 MB for a 100 000-file revision).
CACHED_LISTS = 8
#: A search that read more unindexed blobs than this asks this process to index them.
INDEX_AFTER_SCANNING = 64
#: Blobs written to the index per transaction.
INDEX_CHUNK = 500

#: Blob contents kept per process for the searches that read them again (the next page of a
#: search, a popular query): reading a blob deep in a delta chain of git's packs costs up to
#: ~12 ms (git.git), checking it a fraction of that.
BLOB_CACHE_BYTES = 64 << 20
_blob_cache: OrderedDict[bytes, bytes] = OrderedDict()
_blob_cache_size = 0

_indexes: dict[Path, SearchIndex] = {}
#: Indexes a process keeps open (a connection per thread that used one).
OPEN_INDEXES = 256
_lists: OrderedDict[tuple[str, str], FileList] = OrderedDict()
_lock = threading.Lock()


def index_path(name: str) -> Path:
    """Where the search index of repository ``name`` lives: beside its objects."""
    return repository_path(name) / "agentgit-search.sqlite3"


def index_for(name: str) -> SearchIndex:
    """The repository's search index, opened once per process (the OPEN_INDEXES most recently
    used stay open: an index dropped is closed when its last search lets go of it)."""
    path = index_path(name)
    with _lock:
        index = _indexes.pop(path, None)
        if index is None:
            index = SearchIndex(str(path), max_indexed_bytes=settings.AGENTGIT["SEARCH_INDEX_MAX_BYTES"])
        _indexes[path] = index  # the most recently used last
        while len(_indexes) > OPEN_INDEXES:
            _indexes.pop(next(iter(_indexes)))
        return index


def forget_index(name: str) -> None:
    """Drop this process's handle on the index (after its file was removed)."""
    with _lock:
        index = _indexes.pop(index_path(name), None)
        for key in [key for key in _lists if key[0] == name]:
            del _lists[key]
    if index is not None:
        index.close()


# ---------------------------------------------------------------------------- file lists


def _remember(name: str, files: FileList) -> FileList:
    with _lock:
        _lists[name, files.tree] = files
        _lists.move_to_end((name, files.tree))
        while len(_lists) > CACHED_LISTS:
            _lists.popitem(last=False)
    return files


def _known_list(name: str, tree: str) -> FileList | None:
    with _lock:
        found = _lists.get((name, tree))
        if found is not None:
            _lists.move_to_end((name, tree))
            return found
    loaded = index_for(name).load_list(tree)
    return None if loaded is None else _remember(name, loaded)


def file_list(name: str, commit: str) -> FileList:
    """The searched files of a changeset: known (this process's, or saved in the index), derived
    along the changed paths from the nearest first-parent ancestor whose list is known (up to
    ANCESTORS_WALKED back), or walked."""
    store = store_for(name)
    found = store.read_commit(commit)
    known = _known_list(name, found.tree)
    if known is not None:
        return known
    trees = [found.tree]
    parents = found.parents
    for _ in range(ANCESTORS_WALKED):
        if not parents:
            break
        ancestor = store.read_commit(parents[0])
        base = _known_list(name, ancestor.tree)
        if base is not None:
            for tree in reversed(trees):
                base = base.changed(tree, file_changes(store, base.tree, tree))
            return _remember(name, base)
        trees.append(ancestor.tree)
        parents = ancestor.parents
    return _remember(name, FileList.of_tree(store, found.tree))


#: How far back :func:`file_list` looks for a known list before walking the whole tree.
ANCESTORS_WALKED = 64
#: A head's list is saved in the index when its repository holds fewer files than this, else for
#: one head in SAVE_ONE_IN (by commit id): compressing 100 000 paths costs a landing's indexing
#: ~50 ms, and a process that lacks a list derives it from a saved ancestor's (ANCESTORS_WALKED).
SAVE_EVERY_LIST_BELOW = 10_000
SAVE_ONE_IN = 16


def _worth_saving(files: FileList, commit: str) -> bool:
    return len(files) < SAVE_EVERY_LIST_BELOW or int(commit[:8], 16) % SAVE_ONE_IN == 0


# ---------------------------------------------------------------------------- indexing


def _index_blobs(name: str, blobs: list[bytes], progress: Callable[[int, int], None] | None = None) -> int:
    index = index_for(name)
    store = store_for(name)
    missing = index.missing(blobs)
    added = 0
    for start in range(0, len(missing), INDEX_CHUNK):
        chunk = missing[start : start + INDEX_CHUNK]
        added += index.add((blob, store.read_blob(blob.hex())) for blob in chunk)
        if progress is not None:
            progress(start + len(chunk), len(missing))
    return added


def index_head(name: str, commit: str) -> int:
    """Index what changeset ``commit`` holds that the index does not, and save its file list
    (the after-commit job of a landing). Answers how many blobs were added."""
    files = file_list(name, commit)
    added = _index_blobs(name, files.blobs)
    if _worth_saving(files, commit):
        index_for(name).save_list(files)
    return added


#: After a landing commits: index its new head (detached: never holds the landing's answer).
INDEX_HEAD = Job("workers.tasks.index_search", index_head, detached=True)


def after_landing(repository: Repository, head: str) -> None:
    """Index ``head`` once the current transaction commits."""
    after_commit(INDEX_HEAD, repository.name, head)


@dataclass(frozen=True)
class IndexProgress:
    repository: str
    stream: str
    done: int
    total: int


def index_missing(names: list[str] | None = None, progress: Callable[[IndexProgress], None] | None = None) -> int:
    """Index what the heads of the repositories ``names`` hold that the index does not (by
    default every repository with a head moved since its index last changed): the distinct
    heads of its INDEXED_STREAMS most recently moved streams. Answers how many blobs were added;
    the other heads are read by their searches and indexed then (:func:`_index_scanned`)."""
    added = 0
    for name in _stale(names):
        heads = Stream.objects.filter(repository__name=name, head__isnull=False).order_by("-updated")
        here = 0
        seen: set[str] = set()
        for stream_name, head in heads.values_list("name", "head")[:INDEXED_STREAMS]:
            if head in seen:
                continue
            seen.add(str(head))
            files = file_list(name, str(head))

            def report(done: int, total: int, stream_name: str = stream_name, repo: str = name) -> None:
                if progress is not None:
                    progress(IndexProgress(repo, stream_name, done, total))

            here += _index_blobs(name, files.blobs, report)
            index_for(name).save_list(files)  # every head's: a cold process starts there
        if here:
            index_for(name).optimize()
        added += here
        forget_index(name)  # one repository's connection at a time, however many there are
    return added


#: Stream heads of a repository that recovery indexes (the most recently moved).
INDEXED_STREAMS = 64


def _stale(names: list[str] | None) -> list[str]:
    """The repositories (of ``names``, or all) with a head that moved since their index's file
    last changed, or with no index: one query and a file's times per repository, so that a
    start with many repositories opens only the indexes that lack something."""
    latest = Stream.objects.filter(head__isnull=False)
    if names is not None:
        latest = latest.filter(repository__name__in=names)
    stale = []
    for name, moved in (
        latest.values_list("repository__name").annotate(moved=Max("updated")).order_by("repository__name")
    ):
        path = index_path(name)
        changed = [p.stat().st_mtime for p in (path, path.with_name(path.name + "-wal")) if p.exists()]
        if names is not None or not path.exists() or moved.timestamp() > max(changed):
            stale.append(name)
    return stale


#: Recovery's request: index what is missing, in the background.
INDEX_MISSING = Job("workers.tasks.index_search_missing", index_missing, detached=True)


def index_missing_later(names: list[str] | None = None) -> None:
    """Ask for :func:`index_missing` off this thread (a worker, or a thread of this process)."""
    after_commit(INDEX_MISSING, names)


_scanning: set[tuple[str, str]] = set()


def _index_scanned(name: str, commit: str) -> None:
    """A search read many blobs the index lacks (a node that did not see the landings, an
    index being rebuilt): index that revision on a thread of this process, once at a time."""
    key = (name, commit)
    with _lock:
        if key in _scanning:
            return
        _scanning.add(key)

    def run() -> None:
        try:
            index_head(name, commit)
        except Exception:  # derived data: the next search or recovery tries again
            logger.exception("indexing %s at %s for search failed", name, commit)
        finally:
            with _lock:
                _scanning.discard(key)

    threading.Thread(target=run, name="search-index", daemon=True).start()


@dataclass(frozen=True)
class IndexState:
    """What admin shows of a repository's index."""

    stats: IndexStats
    #: Blobs at the default stream's head that the index does not hold (None: no head).
    missing_at_default: int | None
    files_at_default: int | None


def index_state(repository: Repository) -> IndexState:
    index = index_for(repository.name)
    stream = Stream.objects.filter(repository=repository, name=repository.default_stream).first()
    missing = files = None
    if stream is not None and stream.head:
        listed = file_list(repository.name, stream.head)
        files = len(listed)
        missing = len(index.missing(listed.blobs))
    return IndexState(index.stats(), missing, files)


# ---------------------------------------------------------------------------- searching


@dataclass(frozen=True)
class Cursor:
    """Where a page starts: the changeset searched and the position in it."""

    commit: str
    path: str | None = None
    line: int = 0


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def search_code(
    repository: Repository,
    q: str,
    *,
    rev: str | None = None,
    fixed: bool = False,
    ignore_case: bool = False,
    word: bool = False,
    paths: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    context: int = 0,
    mode: str = CONTENT,
    target: str = "content",
    limit: int = DEFAULT_LIMIT,
    cursor: Cursor | None = None,
    timeout_s: float | None = None,
) -> tuple[dict, Cursor | None]:
    """The answer of API.md's search, and the cursor of the next page (None when complete)."""
    if mode not in MODES:
        raise Invalid(f"?mode= is one of {', '.join(MODES)}, not {mode!r}")
    if target not in TARGETS:
        raise Invalid(f"?target= is one of {', '.join(TARGETS)}, not {target!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise Invalid(f"?limit= is between 1 and {MAX_LIMIT}, not {limit}")
    if not 0 <= context <= MAX_CONTEXT:
        raise Invalid(f"?context= is between 0 and {MAX_CONTEXT}, not {context}")
    try:
        matcher = Matcher(q, fixed=fixed, ignore_case=ignore_case, word=word)
    except EngineError as error:
        raise from_engine(error) from None
    commit = cursor.commit if cursor is not None else resolve_rev(repository, rev or repository.default_stream)
    try:
        files = file_list(repository.name, commit)
    except EngineError as error:
        raise from_engine(error) from None
    filters = PathFilter(tuple(paths), tuple(exclude))
    if target == "paths":
        found = search_paths(files, matcher, limit=limit, paths=filters, after=cursor.path if cursor else None)
        page = [{"path": hit.path} for hit in found.files]
        resume = Cursor(commit, found.resume.path) if found.resume is not None else None
        return {"rev": commit, "files": page, "truncated": found.truncated}, resume
    timeout = settings.AGENTGIT["SEARCH_TIMEOUT_S"] if timeout_s is None else timeout_s
    index = index_for(repository.name)
    store = store_for(repository.name)
    read = _counting_reader(store.read_blob, index.refresh())
    result = search(
        files,
        matcher,
        read,
        index,
        mode=mode,
        limit=limit,
        context=context,
        paths=filters,
        start=Position(cursor.path, cursor.line) if cursor is not None else Position(),
        deadline=time.monotonic() + timeout,
    )
    if read.unindexed > INDEX_AFTER_SCANNING:
        _index_scanned(repository.name, commit)
    resume = None
    if result.resume is not None:
        resume = Cursor(commit, result.resume.path, result.resume.line)
    if mode == COUNT:
        return {"rev": commit, "count": result.count, "truncated": result.timed_out}, None
    if mode == FILES:
        listed = [
            {"path": hit.path, "matches": hit.count, **({"binary": True} if hit.binary else {})} for hit in result.files
        ]
        return {"rev": commit, "files": listed, "truncated": result.truncated}, resume
    matches: list[dict] = []
    for hit in result.files:
        if hit.binary:
            matches.append({"path": hit.path, "binary": True})
            continue
        for line in hit.lines:
            match: dict = {"path": hit.path, "line": line.line, "column": line.column, "text": _text(line.text)}
            if context:
                match["before"] = [_text(text) for text in line.before]
                match["after"] = [_text(text) for text in line.after]
            matches.append(match)
    return {"rev": commit, "matches": matches, "truncated": result.truncated}, resume


class _counting_reader:  # noqa: N801 (a callable, used as a function)
    """``read(blob id)`` through this process's cache and the store, counting the blobs the
    index does not hold."""

    def __init__(self, read_blob: Callable[[str], bytes], known: dict[bytes, int]) -> None:
        self.read_blob, self.known, self.unindexed = read_blob, known, 0

    def __call__(self, blob: bytes) -> bytes:
        global _blob_cache_size
        if blob not in self.known:
            self.unindexed += 1
        with _lock:
            data = _blob_cache.get(blob)
            if data is not None:
                _blob_cache.move_to_end(blob)
                return data
        data = self.read_blob(blob.hex())
        if len(data) <= BLOB_CACHE_BYTES // 16:
            with _lock:
                if blob not in _blob_cache:
                    _blob_cache[blob] = data
                    _blob_cache_size += len(data)
                while _blob_cache_size > BLOB_CACHE_BYTES:
                    _evicted, gone = _blob_cache.popitem(last=False)
                    _blob_cache_size -= len(gone)
        return data


def highlight(q: str, text: str, *, fixed: bool = False, ignore_case: bool = False) -> list[tuple[str, bool]]:
    """A line cut into ``(piece, matched)`` pieces, for the web UI to mark what the pattern matched."""
    try:
        matcher = Matcher(q, fixed=fixed, ignore_case=ignore_case)
    except EngineError:
        return [(text, False)]
    data = text.encode("utf-8", "surrogateescape")
    pieces: list[tuple[str, bool]] = []
    done = 0
    for start, end in matcher.spans(data):
        if start > done:
            pieces.append((data[done:start].decode("utf-8", "replace"), False))
        pieces.append((data[start:end].decode("utf-8", "replace"), True))
        done = end
    if done < len(data):
        pieces.append((data[done:].decode("utf-8", "replace"), False))
    return pieces
