"""History of one path: blame and log.

Both look up one path per changeset visited (:func:`engine.trees.lookup_segments`: one parsed
tree per path segment, cached by the store) and never build, diff or iterate whole trees, so
their cost follows the number of changesets walked and the depth of the path, not the number
of files in the repository.

* :func:`blame` answers what ``git blame --first-parent`` answers (on a linear history, plain
  ``git blame``): the same diff (git's xdiff, through libgit2) and the same whole-file rename
  following (git's rename detection with the blamed path as its only destination).
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
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import NamedTuple, Protocol

from .errors import CorruptObject, InvalidInput, PathNotFound, WrongObjectType
from .graph import graph_node, known_nodes
from .objects import (
    MODE_GITLINK,
    MODE_TREE,
    TREE,
    Entry,
    ObjectId,
    check_object_id,
    is_binary,
    split_lines,
    split_path,
)
from .store import ObjectStore
from .trees import Deleted, changed_paths, diff_trees, lookup_segments

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
    #: The file's path in that changeset: an older path where the file was renamed since (git
    #: blame's ``filename``).
    path: str


def blame(store: ObjectStore, commit_id: ObjectId, path: str, *, index: PathIndex | None = None) -> list[BlameLine]:
    """Attribute every line of ``path`` at ``commit_id`` to the changeset that introduced it:
    what ``git blame --first-parent`` answers, line by line.

    Walks the first-parent chain as git's blame does with one parent per commit:

    * where the file's blob is unchanged from the parent, its lines pass to the parent without
      a diff (with an ``index``, without even looking the file up in the changesets the index
      shows leaving it alone);
    * otherwise parent and child are matched with git's own diff (:func:`_diff_hunks`: xdiff's
      Myers with the indent heuristic, as ``git blame`` runs it by default), and the child's
      lines inside a hunk belong to the child;
    * where the parent has nothing at the path (or a directory), the file was created or
      renamed: :func:`_find_rename` looks for the file it came from as ``git blame`` does (a
      whole-file rename, exact or at least 50 % similar) and the walk continues at the old
      path; without one, the lines left belong to that changeset;
    * where the parent has something of another type there (a symlink for a file, a
      submodule), the lines left belong to that changeset, as in git;
    * at the root, the lines left belong to the root.

    Binary files are blamed by ``\\n``-separated lines, as git does. Raises
    ``InvalidObjectId``, ``UnsafePath``, ``ObjectMissing``, ``WrongObjectType`` (not a commit,
    or ``path`` is a directory or submodule) and ``PathNotFound``.
    """
    segments = split_path(path)
    commit = store.read_commit(check_object_id(commit_id))
    found, trees = _lookup_once(store, commit.tree, segments)
    if found is None:
        raise PathNotFound(f"no such file at {commit_id}: {path}")
    if found.mode in _NOT_A_FILE:
        raise WrongObjectType(f"not a file at {commit_id}: {path}")
    entry = found
    data = store.read_blob(entry.id)
    lines = split_lines(data)
    owners: list[tuple[ObjectId, str]] = [("", path)] * len(lines)
    runs = _Runs(len(lines))
    # The commit examined: its parents, its tree once read (a jump over changesets that leave
    # the file alone reads no commit: the tree is only needed to look for a rename), and the
    # trees along the path when known.
    current_id, parents = commit_id, commit.parents
    tree: ObjectId | None = commit.tree
    path_trees: list[ObjectId] | None = trees
    changes = _PathChanges(index, path) if index is not None else None
    while runs and parents:
        if changes is not None:
            # Changesets the index shows leaving the file alone pass its lines on untouched:
            # skip to the first one that may change it, without looking the file up on the way.
            changed_id = changes.last_unchanged(store, current_id, set())
            if changed_id is not None and changed_id != current_id:
                current_id, parents, tree, path_trees = changed_id, graph_node(store, changed_id).parents, None, None
                continue
        owner = (current_id, path)
        parent_id = parents[0]
        parent = store.read_commit(parent_id)
        parent_entry, found_trees = _lookup_once(store, parent.tree, segments, path_trees, entry)
        parent_trees: list[ObjectId] | None = found_trees
        if parent_entry is None or parent_entry.mode == MODE_TREE:
            if tree is None:
                tree = store.read_commit(current_id).tree
            origin = _find_rename(store, parent.tree, tree, path, entry)
            if origin is None:
                break
            path, parent_entry = origin
            segments = split_path(path)
            parent_trees = None
            changes = _PathChanges(index, path) if index is not None else None
        elif _file_type(parent_entry.mode) != _file_type(entry.mode):
            break  # git's blame stops at a type change (file <-> symlink, submodule)
        if parent_entry.id != entry.id:
            parent_data = store.read_blob(parent_entry.id)
            runs.pass_to_parent(_diff_hunks(parent_data, data), owners, owner)
            data = parent_data
        entry = parent_entry
        current_id, parents, tree, path_trees = parent_id, parent.parents, parent.tree, parent_trees
    for target, length in zip(runs.targets, runs.lengths):
        owners[target : target + length] = [(current_id, path)] * length
    return [
        BlameLine(number, changeset, _line_text(line), at)
        for number, ((changeset, at), line) in enumerate(zip(owners, lines), start=1)
    ]


def _lookup_once(
    store: ObjectStore,
    tree_id: ObjectId,
    segments: list[str],
    child_trees: list[ObjectId] | None = None,
    child_entry: Entry | None = None,
) -> tuple[Entry | None, list[ObjectId]]:
    """The entry at the path and the trees along it (complete when there is an entry), as a
    blame step needs them: each tree read is new at a step that changes the file, so the name is
    searched in its bytes (:func:`_find_entry`), with no :class:`~engine.objects.Tree` built or
    cached (a root of 560 entries: 0.03 ms against 1 ms). Where a tree along the path is one of
    ``child_trees`` (the child's trees along the same path), the rest is the child's: the entry
    is ``child_entry`` and nothing more is read, as git's tree diff skips equal subtrees.

    A name in the escaped form (bytes that are not UTF-8, a backslash) is looked up through the
    store, so that it is matched as the store decodes it."""
    trees: list[ObjectId] = []
    entry: Entry | None = Entry(MODE_TREE, tree_id)
    for depth, segment in enumerate(segments):
        if entry is None or entry.mode != MODE_TREE:
            return None, trees
        if child_trees is not None and child_trees[depth] == entry.id:
            return child_entry, trees + child_trees[depth:]
        trees.append(entry.id)
        if "\\" in segment:  # an escaped name (engine.objects): matched as the store decodes it
            entry = store.read_tree(entry.id).get(segment)
            continue
        key = segment.encode()
        kind, raw = store.read(entry.id)
        if kind != TREE:
            raise WrongObjectType(f"object {entry.id} is a {kind}, not a {TREE}")
        entry = _find_entry(raw, key)
    return entry, trees


def _find_entry(raw: bytes, name: bytes) -> Entry | None:
    """The entry called ``name`` in raw tree bytes, found without parsing the tree: a search
    for `` name\0``, each hit checked by hopping over the entries before it (an entry is
    ``mode SP name NUL`` and a 20-byte id: its first NUL ends its name, so ids, which may hold
    any byte, are stepped over, never searched). A hit inside another entry's name (``a b``
    holds `` b\0``) or id is passed over."""
    key = b" " + name + b"\x00"
    start = raw.find(key)
    position = 0  # an entry's first byte
    while start >= 0:
        end = start + len(key) - 1  # the hit's NUL
        nul = raw.find(b"\x00", position)
        while 0 <= nul < end:
            position = nul + 21
            nul = raw.find(b"\x00", position)
        if nul == end and raw.find(b" ", position, start + 1) == start:
            try:
                mode = int(raw[position:start], 8)
            except ValueError:
                raise CorruptObject(f"malformed tree entry mode: {raw[position:start]!r}") from None
            return Entry(mode, raw[end + 1 : end + 21].hex())
        start = raw.find(key, start + 1)
    return None


def _file_type(mode: int) -> int:
    return mode & 0o170000


class _Runs:
    """The unattributed lines as runs: ``starts`` in the version examined, ``targets`` in the
    blamed version, ``lengths``; ascending, disjoint. A long-lived file keeps few runs for its
    many lines, and a step touches only the runs its hunks cross: the others move by a slice."""

    def __init__(self, length: int) -> None:
        self.starts: list[int] = [0] if length else []
        self.targets: list[int] = [0] if length else []
        self.lengths: list[int] = [length] if length else []

    def pass_to_parent(
        self, hunks: list[tuple[int, int, int, int]], owners: list[tuple[ObjectId, str]], child: tuple[ObjectId, str]
    ) -> None:
        """Give ``child`` (its changeset and path) the unattributed lines inside its hunks and
        move the rest into the parent's numbering. ``hunks`` are ``(parent start, parent end,
        child start, child end)``, 0-based, ascending, as :func:`_diff_hunks` gives them."""
        starts, targets, lengths = self.starts, self.targets, self.lengths
        new_starts: list[int] = []
        new_targets: list[int] = []
        new_lengths: list[int] = []
        count = len(starts)
        i = 0
        offset = 0  # parent line = child line + offset, between hunks
        for _, old_end, new_start, new_end in hunks:
            # Lines before the hunk keep their order: move them by the offset.
            j = bisect_left(starts, new_start, i)
            if j > i:
                last = j - 1
                cut = new_start - starts[last]
                whole = j if lengths[last] <= cut else last
                new_starts.extend([start + offset for start in starts[i:whole]])
                new_targets.extend(targets[i:whole])
                new_lengths.extend(lengths[i:whole])
                if whole == last:  # the last run crosses into the hunk: split it there
                    new_starts.append(starts[last] + offset)
                    new_targets.append(targets[last])
                    new_lengths.append(cut)
                    starts[last] = new_start
                    targets[last] += cut
                    lengths[last] -= cut
                i = whole
            # Lines inside the hunk are the child's.
            while i < count and starts[i] < new_end:
                take = min(lengths[i], new_end - starts[i])
                owners[targets[i] : targets[i] + take] = [child] * take
                if take < lengths[i]:
                    starts[i] = new_end
                    targets[i] += take
                    lengths[i] -= take
                    break
                i += 1
            offset = old_end - new_end
        new_starts.extend([start + offset for start in starts[i:]])
        new_targets.extend(targets[i:])
        new_lengths.extend(lengths[i:])
        self.starts, self.targets, self.lengths = new_starts, new_targets, new_lengths

    def __bool__(self) -> bool:
        return bool(self.starts)


def _diff_hunks(old: bytes, new: bytes) -> list[tuple[int, int, int, int]]:
    """The hunks of ``git diff -U0`` from ``old`` to ``new``: ``(old start, old end, new start,
    new end)``, 0-based, half-open, ascending.

    git's xdiff through libgit2, which vendors it, called as git's blame calls it
    (``diff_hunks`` in git's blame.c): Myers' diff, xdiff's change compaction with the indent
    heuristic (on by default), no context. Like git's ``xdi_diff``, whole 1 KiB blocks of common
    tail are cut off first (back to a line end): it decides where an ambiguous insertion or
    deletion in a long run of repeated lines lands.
    """
    import pygit2  # here, as in engine.store: a memory-only user imports the engine without libgit2

    option = pygit2.enums.DiffOption
    old, new = _trim_common_tail(old, new)
    patch = pygit2.Patch.create_from(
        old, new, context_lines=0, interhunk_lines=0, flag=option.FORCE_TEXT | option.INDENT_HEURISTIC
    )
    out = []
    for hunk in patch.hunks:
        # A unified hunk that adds or removes nothing on a side names the line before it.
        old_start = hunk.old_start - 1 if hunk.old_lines else hunk.old_start
        new_start = hunk.new_start - 1 if hunk.new_lines else hunk.new_start
        out.append((old_start, old_start + hunk.old_lines, new_start, new_start + hunk.new_lines))
    return out


def _trim_common_tail(a: bytes, b: bytes) -> tuple[bytes, bytes]:
    """git's ``trim_common_tail`` (xdiff-interface.c): drop the common tail in whole 1 KiB
    blocks, then give back what follows the first line end of the dropped part."""
    block = 1024
    size_a, size_b = len(a), len(b)
    # Equal tails of k blocks hold for every smaller k: find the largest by bisection, each
    # test one comparison at C speed, instead of git's block-by-block loop in Python.
    low, high = 0, min(size_a, size_b) // block
    with memoryview(b) as view:
        while low < high:
            middle = (low + high + 1) // 2
            if a.endswith(view[size_b - middle * block :]):
                low = middle
            else:
                high = middle - 1
    trimmed = low * block
    if not trimmed:
        return a, b
    newline = a.find(b"\n", size_a - trimmed, size_a)
    recovered = trimmed if newline < 0 else newline + 1 - (size_a - trimmed)
    cut = trimmed - recovered
    return a[: size_a - cut], b[: size_b - cut]


# git's rename scores run from 0 to MAX_SCORE (diffcore.h); a rename needs 50 % by default, and
# a pair of files with the same name is taken before the others from 75 % (diffcore-rename.c).
_MAX_SCORE = 60_000
_RENAME_SCORE = 30_000
_BASENAME_SCORE = _RENAME_SCORE + (_MAX_SCORE - _RENAME_SCORE) // 2
#: git's ``diff.renameLimit`` default: above this many sources squared, no inexact detection.
_RENAME_LIMIT = 1000
#: git looks at most this many identical candidates for an exact rename.
_EXACT_CANDIDATES = 100
_S_IFREG = 0o100000


def _find_rename(
    store: ObjectStore, parent_tree: ObjectId, tree: ObjectId, path: str, entry: Entry
) -> tuple[str, Entry] | None:
    """The file of the parent that ``path`` was renamed from, or None: ``find_rename`` of git's
    blame.c, which runs git's rename detection with ``path`` as the only destination.

    The sources are the files the changeset deleted, in path order. git takes, in turn: the
    first source with the same blob (one with the same file name first); else the one source
    with the same file name, if only one has it and it is at least 75 % similar; else the most
    similar source at 50 % or more (ties: the same file name, then git's candidate order).
    Similarity is git's (:func:`_similarity`); only regular files are compared by content.
    """
    sources = [
        change
        for change in diff_trees(store, parent_tree, tree)
        if isinstance(change, Deleted) and change.old.mode != MODE_GITLINK
    ]
    if not sources:
        return None
    sources.sort(key=lambda change: _git_path_order(change.path))
    name = path.rpartition("/")[2]
    exact: Deleted | None = None
    candidates = 0
    for source in sources:
        if source.old.id != entry.id:
            continue
        if not (_is_regular(source.old.mode) and _is_regular(entry.mode)) and source.old.mode != entry.mode:
            continue
        if exact is None:
            exact = source
        if source.path.rpartition("/")[2] == name:
            exact = source
            break
        candidates += 1
        if candidates == _EXACT_CANDIDATES:
            break
    if exact is not None:
        return exact.path, exact.old
    if not _is_regular(entry.mode):
        return None  # git compares only regular files by content
    signatures = _Signatures(store)
    same_name = [source for source in sources if source.path.rpartition("/")[2] == name]
    if len(same_name) == 1:
        source = same_name[0]
        if _similarity(signatures, source.old, entry, _BASENAME_SCORE) >= _BASENAME_SCORE:
            return source.path, source.old
    if len(sources) > _RENAME_LIMIT * _RENAME_LIMIT:
        return None
    scores: dict[int, tuple[int, int]] = {}

    def score(number: int) -> tuple[int, int]:
        found = scores.get(number)
        if found is None:
            source = sources[number]
            similarity = _similarity(signatures, source.old, entry, _RENAME_SCORE)
            found = scores[number] = (similarity, int(source.path.rpartition("/")[2] == name))
        return found

    # A score is at most the smaller size over the larger (shared bytes are bytes of both), so
    # the sources are scored best bound first, down to the best score found: a commit that
    # renames a whole directory has hundreds of sources, and git's spans cost Python a step per
    # byte. Only a tie for the best needs git's candidate order below.
    bounds = sorted(
        ((_score_bound(signatures, source.old, entry), number) for number, source in enumerate(sources)),
        key=lambda item: -item[0],
    )
    top = -1
    for bound, number in bounds:
        if bound < max(top, _RENAME_SCORE):
            break
        top = max(top, score(number)[0])
    if top < _RENAME_SCORE:
        return None
    best = max(scores.values())
    winners = [number for number, found in scores.items() if found == best]
    if len(winners) == 1:
        return sources[winners[0]].path, sources[winners[0]].old
    # git keeps the best four candidates per destination in four slots, replacing the worst
    # only with a strictly better one, then sorts the slots stably: a tie is settled by where
    # the slots put the tied sources, which takes every source's score in git's order.
    slots: list[tuple[int, int, int] | None] = [None] * 4
    for number in range(len(sources)):
        candidate = (*score(number), number)
        worst = 0
        for slot in range(1, 4):
            if _worse(slots[slot], slots[worst]):
                worst = slot
        if _worse(slots[worst], candidate):
            slots[worst] = candidate
    chosen = slots[min(range(4), key=lambda slot: _rank(slots[slot], slot))]
    if chosen is None:
        return None
    return sources[chosen[2]].path, sources[chosen[2]].old


def _score_bound(signatures: _Signatures, source: Entry, destination: Entry) -> int:
    """The most :func:`_similarity` can give the pair (from the sizes alone)."""
    if not (_is_regular(source.mode) and _is_regular(destination.mode)):
        return 0
    size_a, size_b = signatures.size(source.id), signatures.size(destination.id)
    largest, smallest = max(size_a, size_b), min(size_a, size_b)
    if not largest or largest * (_MAX_SCORE - _RENAME_SCORE) < (largest - smallest) * _MAX_SCORE:
        return 0
    return smallest * _MAX_SCORE // largest


def _worse(a: tuple[int, int, int] | None, b: tuple[int, int, int] | None) -> bool:
    """git's ``score_compare(a, b) > 0``: ``a`` ranks below ``b`` (an empty slot below all)."""
    if a is None:
        return b is not None
    if b is None:
        return False
    return (a[0], a[1]) < (b[0], b[1])


def _rank(candidate: tuple[int, int, int] | None, slot: int) -> tuple[int, int, int]:
    if candidate is None:
        return (1, 0, slot)
    return (0, -(candidate[0] * 2 + candidate[1]), slot)


def _is_regular(mode: int) -> bool:
    return _file_type(mode) == _S_IFREG


def _git_path_order(path: str) -> bytes:
    # Full paths compared as bytes order files as git's tree walk meets them.
    return path.encode("utf-8", "surrogateescape")


class _Signatures:
    """git's content signatures of blobs (diffcore-delta), each computed once per rename search."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._sizes: dict[ObjectId, int] = {}
        self._counts: dict[ObjectId, dict[int, int]] = {}

    def size(self, oid: ObjectId) -> int:
        size = self._sizes.get(oid)
        if size is None:
            size = self._sizes[oid] = len(self._store.read_blob(oid))
        return size

    def counts(self, oid: ObjectId) -> dict[int, int]:
        counts = self._counts.get(oid)
        if counts is None:
            counts = self._counts[oid] = _span_counts(self._store.read_blob(oid))
        return counts


def _similarity(signatures: _Signatures, source: Entry, destination: Entry, minimum: int) -> int:
    """git's ``estimate_similarity``: the bytes of the destination's spans also in the source,
    over the larger size, scaled to ``_MAX_SCORE``; 0 for files too different in size to reach
    ``minimum``, and for anything but two regular files."""
    if not (_is_regular(source.mode) and _is_regular(destination.mode)):
        return 0
    size_a, size_b = signatures.size(source.id), signatures.size(destination.id)
    largest, smallest = max(size_a, size_b), min(size_a, size_b)
    if largest * (_MAX_SCORE - minimum) < (largest - smallest) * _MAX_SCORE:
        return 0
    if not size_b:
        return 0
    a, b = signatures.counts(source.id), signatures.counts(destination.id)
    copied = sum(min(count, b.get(span, 0)) for span, count in a.items())
    return copied * _MAX_SCORE // largest


_HASHBASE = 107_927
_MASK = 0xFFFFFFFF
_SPAN = 64
#: Span hashes already computed: the same lines recur across the candidates and versions.
#: Bounded (a few MB): emptied when it outgrows this many spans.
_span_hashes: dict[bytes, int] = {}
_SPAN_HASHES_KEPT = 1 << 16


def _span_counts(data: bytes) -> dict[int, int]:
    """git's ``hash_chars`` (diffcore-delta.c): content cut into spans that end at a newline or
    after 64 bytes, each hashed into one of 107 927 values (collisions are part of git's score),
    with the bytes per value. In text, a CR before a LF is skipped."""
    if not is_binary(data):
        data = data.replace(b"\r\n", b"\n")
    counts: dict[int, int] = {}
    hashes = _span_hashes
    if len(hashes) > _SPAN_HASHES_KEPT:
        hashes.clear()
    lines = data.split(b"\n")
    last = lines.pop()
    spans: list[bytes] = []
    for line in lines:
        if len(line) < _SPAN:
            spans.append(line + b"\n")
        else:
            line += b"\n"
            spans.extend(line[start : start + _SPAN] for start in range(0, len(line), _SPAN))
    spans.extend(last[start : start + _SPAN] for start in range(0, len(last), _SPAN))
    for span in spans:
        value = hashes.get(span)
        if value is None:
            value = hashes[span] = _span_hash(span)
        counts[value] = counts.get(value, 0) + len(span)
    return counts


def _span_hash(span: bytes) -> int:
    # 32-bit unsigned arithmetic, as in C: a 64-bit rotation by 7 of (accum2, accum1), plus the byte.
    accum1 = accum2 = 0
    for byte in span:
        accum1, accum2 = ((((accum1 << 7) ^ (accum2 >> 25)) + byte) & _MASK, ((accum2 << 7) ^ (accum1 >> 25)) & _MASK)
    return ((accum1 + accum2 * 0x61) & _MASK) % _HASHBASE


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
