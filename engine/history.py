"""History of one path: blame and log.

Both look up one path per changeset visited (:func:`engine.trees.lookup_segments`: one parsed
tree per path segment, cached by the store) and never build, diff or iterate whole trees, so
their cost follows the number of changesets walked and the depth of the path, not the number
of files in the repository.

* :func:`blame` follows the first-parent chain, like ``git blame --first-parent``; on a
  linear history that is plain ``git blame``. Renames are not followed: the lines of a file
  that was renamed are attributed to the changeset that created it at its current path
  (``git blame`` would follow a whole-file rename into the old path).
* :func:`log` lists what ``git log -- PATH`` lists, in the same order, including git's
  default history simplification of merges (see :func:`iter_log`). The path is literal:
  git would treat ``*``, ``?`` and ``[`` in a pathspec as wildcards; we do not.
* :func:`log_page` pages through a log with an opaque cursor.
* A :class:`PathIndex` (derived data, optional) makes ``log -- path`` cost what its answer
  costs instead of what the history costs: :func:`derive` computes, per changeset, the paths
  whose entry differs from its first parent; the walk then passes over the changesets that
  leave the path alone without reading a tree. :class:`MemoryPathIndex` keeps it in memory;
  the server keeps it in its database (``repos.services.derived``).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import NamedTuple, Protocol

from patiencediff import PatienceSequenceMatcher

from .errors import InvalidInput, PathNotFound, WrongObjectType
from .graph import graph_node, known_nodes
from .objects import MODE_GITLINK, MODE_TREE, Entry, ObjectId, check_object_id, split_lines, split_path
from .store import ObjectStore
from .trees import changed_paths, lookup_segments

__all__ = [
    "BlameLine",
    "blame",
    "iter_log",
    "log",
    "LogPage",
    "log_page",
    "PathIndex",
    "MemoryPathIndex",
    "DerivedCommit",
    "derive",
    "path_key",
]

#: Entry modes that are not file content (a directory, a submodule's commit).
_NOT_A_FILE = (MODE_TREE, MODE_GITLINK)


# ---------------------------------------------------------------------------- blame


class BlameLine(NamedTuple):
    """One line of a blamed file and the changeset that last wrote it."""

    #: 1-based line number in the blamed version.
    number: int
    #: The changeset (commit id) that introduced the line in its current form.
    changeset: ObjectId
    #: The line without its trailing newline, decoded as UTF-8 (undecodable bytes become U+FFFD).
    text: str


def blame(store: ObjectStore, commit_id: ObjectId, path: str, *, index: PathIndex | None = None) -> list[BlameLine]:
    """Attribute every line of ``path`` at ``commit_id`` to the changeset that introduced it.

    Walks the first-parent chain. Where the file's blob is unchanged from the parent, the
    lines pass to the parent without a diff (with an ``index``, without even looking the file up
    in changesets the index shows leaving it alone); otherwise parent and child are matched with
    patience diff and unmatched child lines belong to the child. A line still unattributed
    where the file did not exist in the parent (created, or re-created after a delete), or at
    the root, belongs to that changeset. Binary files are blamed by ``\\n``-separated lines,
    as git does.

    Raises ``InvalidObjectId``, ``UnsafePath``, ``ObjectMissing``, ``WrongObjectType`` (not
    a commit, or ``path`` is a directory or submodule) and ``PathNotFound``.
    """
    segments = split_path(path)
    commit = store.read_commit(check_object_id(commit_id))
    entry = lookup_segments(store, commit.tree, segments)
    if entry is None:
        raise PathNotFound(f"no such file at {commit_id}: {path}")
    if entry.mode in _NOT_A_FILE:
        raise WrongObjectType(f"not a file at {commit_id}: {path}")
    lines = split_lines(store.read_blob(entry.id))
    owners: list[ObjectId] = [""] * len(lines)
    # The unattributed lines: their index in the version being examined (``positions``) and
    # in the blamed version (``targets``), both ascending.
    positions = list(range(len(lines)))
    targets = list(range(len(lines)))
    current_id, current, blob_id, current_lines = commit_id, commit, entry.id, lines
    changes = _PathChanges(index, path) if index is not None else None
    while targets and current.parents:
        if changes is not None:
            # Changesets the index shows leaving the file alone pass its lines on untouched:
            # skip to the first one that may change it, without looking the file up on the way.
            changed_id = changes.last_unchanged(store, current_id, set())
            if changed_id is not None and changed_id != current_id:
                current_id, current = changed_id, store.read_commit(changed_id)
                continue
        parent_id = current.parents[0]
        parent = store.read_commit(parent_id)
        parent_entry = lookup_segments(store, parent.tree, segments)
        if parent_entry is None or parent_entry.mode in _NOT_A_FILE:
            break
        if parent_entry.id != blob_id:
            parent_lines = split_lines(store.read_blob(parent_entry.id))
            to_parent = _match_lines(parent_lines, current_lines)
            kept_positions: list[int] = []
            kept_targets: list[int] = []
            for position, target in zip(positions, targets):
                old = to_parent[position]
                if old < 0:
                    owners[target] = current_id
                else:
                    kept_positions.append(old)
                    kept_targets.append(target)
            positions, targets = kept_positions, kept_targets
            blob_id, current_lines = parent_entry.id, parent_lines
        current_id, current = parent_id, parent
    for target in targets:
        owners[target] = current_id
    return [
        BlameLine(number, owner, _line_text(line)) for number, (owner, line) in enumerate(zip(owners, lines), start=1)
    ]


def _match_lines(old: list[bytes], new: list[bytes]) -> list[int]:
    """For each line of ``new``, the index of the ``old`` line it continues, or -1 if new."""
    to_old = [-1] * len(new)
    for a, b, size in PatienceSequenceMatcher(None, old, new).get_matching_blocks():
        to_old[b : b + size] = range(a, a + size)
    return to_old


def _line_text(line: bytes) -> str:
    # Only "\n" ends a line (as in git), so a "\r" before it is content and stays.
    if line.endswith(b"\n"):
        line = line[:-1]
    return line.decode("utf-8", "replace")


# ---------------------------------------------------------------------------- log


def iter_log(
    store: ObjectStore, rev: ObjectId, path: str | None = None, *, index: PathIndex | None = None
) -> Iterator[ObjectId]:
    """Yield, newest first, the changesets ``git log rev -- path`` shows (all, without a path).

    The walk is git's: a queue ordered by committer time, newest first, where commits with
    equal times leave in the order they entered; each commit enters once, when the first of
    its children to be popped names it. With a path, git's default history simplification
    decides what is shown and which parents are followed, comparing the entry at ``path``
    (mode and id; absent counts as a value) with each parent's:

    * a root commit is shown if the path exists in it;
    * a commit with parents is hidden if its entry equals a parent's entry, and then only the
      first such parent is followed (a merge that took the path unchanged from one side does
      not drag the other side's history in); otherwise it is shown and all parents followed.

    With an ``index``, a commit the index covers and does not list as changing the path is
    known to equal its first parent without reading a tree; a commit it lists is compared
    with its trees as usual (the index may list too much, never too little). And while the
    walk has a single line of hidden commits to follow, it runs down their first parents
    without the queue. The answer is the same with or without an index.

    Lazy: stopping early costs only the commits walked so far.
    """
    segments = split_path(path) if path is not None else None
    check_object_id(rev)
    changes = _PathChanges(index, path) if index is not None and path is not None else None
    nodes = known_nodes(store)

    def parents_and_time(oid: ObjectId) -> tuple[tuple[ObjectId, ...], int]:
        node = nodes.get(oid)
        if node is not None:
            return node.parents, node.time
        commit = store.read_commit(oid)
        return commit.parents, commit.committer.time

    queue: list[tuple[int, int, ObjectId]] = [(-parents_and_time(rev)[1], 0, rev)]
    ticket = 1
    seen = {rev}
    while queue:
        oid = heapq.heappop(queue)[2]
        parents = parents_and_time(oid)[0]
        shown = True
        if segments is not None:
            if not parents:
                shown = lookup_segments(store, store.read_commit(oid).tree, segments) is not None
            else:
                for number, parent in enumerate(parents):
                    if (number == 0 and changes is not None and changes.unchanged(store, oid)) or _same_entry(
                        store, store.read_commit(oid).tree, store.read_commit(parent).tree, segments
                    ):
                        parents = (parent,)
                        shown = False
                        break
                if not shown and not queue and changes is not None and parents[0] not in seen:
                    # One line of history left: run down the first parents that leave the path
                    # alone. Nothing else is queued, so git would pop each of them next, hide it
                    # and queue only its first parent; none can be reached again later (what is
                    # queued from here on are their ancestors).
                    last = changes.last_unchanged(store, parents[0], seen)
                    if last is None:
                        continue  # the line ran into a commit already walked: git stops there too
                    parents = (last,)
        for parent in parents:
            if parent not in seen:
                seen.add(parent)
                heapq.heappush(queue, (-parents_and_time(parent)[1], ticket, parent))
                ticket += 1
        if shown:
            yield oid


def _same_entry(store: ObjectStore, a: ObjectId | None, b: ObjectId | None, segments: list[str]) -> bool:
    """Whether two trees hold the same entry (or both nothing) at the path.

    Descends both trees together and stops at the first pair of identical subtrees: most
    changesets differ from their parent far from the path, so usually only the root is read.
    """
    *directories, name = segments
    for depth, directory in enumerate(directories):
        if a == b:
            return True
        if a is None or b is None:
            return lookup_segments(store, a or b, segments[depth:]) is None
        a = _subtree_id(store.read_tree(a).get(directory))
        b = _subtree_id(store.read_tree(b).get(directory))
    if a == b:
        return True
    if a is None or b is None:
        return lookup_segments(store, a or b, [name]) is None
    return store.read_tree(a).get(name) == store.read_tree(b).get(name)


def _subtree_id(entry: Entry | None) -> ObjectId | None:
    # A file where a directory of the path should be means the path is absent below it.
    return entry.id if entry is not None and entry.mode == MODE_TREE else None


# ---------------------------------------------------------------------------- path index

#: A changeset whose first-parent diff touches more paths than this is not indexed (an import,
#: a vendored tree): the walk compares trees at that one changeset instead.
MAX_INDEXED_PATHS = 10_000


def path_key(path: str) -> int:
    """The index key of a path: 64 bits of its BLAKE2b hash, signed (a database ``bigint``).

    Keys of different paths may collide; the walk checks every listed changeset against its
    trees, so a collision costs a tree comparison, never a wrong answer.
    """
    return int.from_bytes(
        hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big", signed=True
    )


class DerivedCommit(NamedTuple):
    """What :func:`derive` records for one changeset: its graph node and its changed paths."""

    id: ObjectId
    generation: int
    parents: tuple[ObjectId, ...]
    time: int
    #: Keys of the paths whose entry differs from the first parent's (``()`` for a root);
    #: None when there are more than :data:`MAX_INDEXED_PATHS` (not indexed).
    changed: frozenset[int] | None


class PathIndex(Protocol):
    """Derived data: which changesets change a path relative to their first parent."""

    def covers(self, oid: ObjectId) -> bool:
        """Whether ``oid``'s changed paths are recorded (derived, and not too many to index)."""

    def changed(self, key: int, below: int) -> tuple[Iterable[ObjectId], int]:
        """The covered changesets of generation < ``below`` that change the path of ``key``.

        May answer a window: every such changeset of generation >= ``floor`` (the second
        value) is included; ``floor`` is 0 when nothing is left below.
        """


class MemoryPathIndex:
    """A :class:`PathIndex` in a dict, filled from :func:`derive`; ``window`` bounds an answer."""

    def __init__(self, window: int | None = None) -> None:
        self._covered: set[ObjectId] = set()
        self._by_key: dict[int, list[tuple[int, ObjectId]]] = {}
        self._window = window

    def add(self, commits: Iterable[DerivedCommit]) -> None:
        for commit in commits:
            if commit.changed is None:
                continue
            self._covered.add(commit.id)
            for key in commit.changed:
                self._by_key.setdefault(key, []).append((commit.generation, commit.id))

    def covers(self, oid: ObjectId) -> bool:
        return oid in self._covered

    def changed(self, key: int, below: int) -> tuple[list[ObjectId], int]:
        found = sorted((item for item in self._by_key.get(key, ()) if item[0] < below), reverse=True)
        if self._window is None or len(found) <= self._window:
            return [oid for _, oid in found], 0
        floor = found[self._window - 1][0]  # whole generations only
        return [oid for generation, oid in found if generation >= floor], floor


def derive(
    store: ObjectStore,
    head: ObjectId,
    derived: Callable[[ObjectId], bool],
    *,
    max_paths: int = MAX_INDEXED_PATHS,
    max_commits: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[DerivedCommit] | None:
    """The changesets reachable from ``head`` that ``derived`` says are not derived yet, parents
    first, each with its graph node and its first-parent changed paths.

    The walk stops at derived changesets: their ancestors are derived too, provided what this
    returns is recorded parents first (or all at once). With ``max_commits``, finding more
    underived changesets than that returns None before any tree is read. ``progress(done, total)``
    is called as the changed paths are computed (a long history takes a while). Raises
    ``InvalidObjectId``, ``ObjectMissing`` or ``WrongObjectType`` for a bad ``head``.
    """
    check_object_id(head)
    if derived(head):
        return []
    todo = [head]
    stack = [head]
    queued = {head}
    while stack:
        for parent in graph_node(store, stack.pop()).parents:
            if parent not in queued and not derived(parent):
                queued.add(parent)
                todo.append(parent)
                stack.append(parent)
        if max_commits is not None and len(todo) > max_commits:
            return None
    todo.sort(key=lambda oid: graph_node(store, oid).generation)  # parents have lower generations
    out = []
    for oid in todo:
        node = graph_node(store, oid)
        if node.parents:
            old_tree = store.read_commit(node.parents[0]).tree
            paths = changed_paths(store, old_tree, store.read_commit(oid).tree, max_paths)
            changed = None if paths is None else frozenset(path_key(path) for path in paths)
        else:
            changed = frozenset()
        out.append(DerivedCommit(oid, node.generation, node.parents, node.time, changed))
        if progress is not None and (len(out) % 1_000 == 0 or len(out) == len(todo)):
            progress(len(out), len(todo))
    return out


class _PathChanges:
    """One log walk's view of the index for its path, fetched window by window as it descends."""

    def __init__(self, index: PathIndex, path: str) -> None:
        self._index = index
        self._key = path_key(path)
        self._listed: set[ObjectId] = set()
        self._top: int | None = None  # generations in [floor, top) are known
        self._floor = 0

    def unchanged(self, store: ObjectStore, oid: ObjectId) -> bool:
        """Whether the index shows that ``oid`` has its first parent's entry at the path."""
        if not self._index.covers(oid):
            return False
        generation = graph_node(store, oid).generation
        if self._top is None:
            self._top = self._floor = generation + 1
        elif generation >= self._top:
            return False  # above the first commit asked about: not an ancestor of the start
        while generation < self._floor:
            found, self._floor = self._index.changed(self._key, self._floor)
            self._listed.update(found)
        return oid not in self._listed

    def last_unchanged(self, store: ObjectStore, start: ObjectId, seen: set[ObjectId]) -> ObjectId | None:
        """Follow first parents from ``start`` while the index shows the path unchanged: the
        first commit that may change it (or a root), or None when the line reaches ``seen``."""
        current = start
        covers, nodes, listed = self._index.covers, known_nodes(store), self._listed
        while covers(current):
            node = nodes.get(current) or graph_node(store, current)
            parents = node.parents
            if not parents:
                break
            # The common case inline (this loop may run down a whole history): a generation
            # the fetched windows already cover needs only the membership test.
            if self._top is not None and self._floor <= node.generation < self._top:
                if current in listed:
                    break
            elif not self.unchanged(store, current):
                break
            if parents[0] in seen:
                return None
            current = parents[0]
        return current


def log(
    store: ObjectStore,
    rev: ObjectId,
    path: str | None = None,
    *,
    limit: int | None = None,
    skip: int = 0,
    index: PathIndex | None = None,
) -> list[ObjectId]:
    """The changesets ``git log --skip=SKIP -n LIMIT rev -- path`` lists, newest first.

    ``limit`` None means no limit. Raises ``InvalidObjectId``, ``UnsafePath``,
    ``ObjectMissing``, ``WrongObjectType`` and ``InvalidInput`` (negative limit or skip).
    A path that never existed gives ``[]``; one that was deleted still has its history.
    """
    if skip < 0 or (limit is not None and limit < 0):
        raise InvalidInput(f"limit and skip must not be negative (limit={limit}, skip={skip})")
    stop = None if limit is None else skip + limit
    return list(islice(iter_log(store, rev, path, index=index), skip, stop))


class LogPage(NamedTuple):
    """One page of a log and the cursor of the next page (None on the last page)."""

    changesets: list[ObjectId]
    next: str | None


def log_page(
    store: ObjectStore,
    rev: ObjectId | None,
    path: str | None = None,
    *,
    limit: int,
    cursor: str | None = None,
    index: PathIndex | None = None,
) -> LogPage:
    """A page of :func:`log` with an opaque cursor, stable while the stream moves on.

    The cursor is ``"<start commit id>+<offset>"`` (GitHub's ``after=`` form). It pins the
    commit the first page started from, so when the caller passes a stream's new head as
    ``rev`` for page two, the pages still continue the first walk: no duplicates, no gap.
    With a cursor, ``rev`` is therefore ignored. Resuming re-walks the ``offset`` results
    before the page (git's walk state — queue and seen set — is too large for a cursor, and a
    queue without its seen set would list commits twice after equal-time merges), so a page
    costs what the history up to its end costs. Raises ``InvalidInput`` for a malformed
    cursor or a limit below 1, and whatever :func:`log` raises.
    """
    if limit < 1:
        raise InvalidInput(f"limit must be at least 1, not {limit}")
    if cursor is None and rev is None:
        raise InvalidInput("a log starts at a changeset or continues from a cursor")
    start, offset = (check_object_id(rev), 0) if cursor is None else _parse_cursor(cursor)
    found = list(islice(iter_log(store, start, path, index=index), offset, offset + limit + 1))
    if len(found) > limit:
        return LogPage(found[:limit], f"{start}+{offset + limit}")
    return LogPage(found, None)


def _parse_cursor(cursor: str) -> tuple[ObjectId, int]:
    start, plus, offset = cursor.partition("+")
    if not plus or not offset.isdigit() or not offset.isascii():
        raise InvalidInput(f"malformed log cursor: {cursor!r}")
    return check_object_id(start), int(offset)
