"""Rename detection from change lists: exact by blob id, then by content similarity (git's 50 %).

It works from the added and deleted files of a diff only, never from whole trees, so its cost
follows the change. Similarity is git's (diffcore-delta): content is cut into chunks that end
at a newline or after 64 bytes; the score is the bytes of chunks both files share over the size
of the larger file. A source is only compared with the destinations whose size allows the
threshold (the shared bytes are at most the smaller size), chunk by chunk of the two.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence

from .objects import MODE_GITLINK, MODE_TREE, Entry, ObjectId
from .trees import Added, Change, Deleted, FileChange, Renamed, TreeReader, diff_trees

#: git's default minimum similarity for a rename (``-M50%``).
DEFAULT_THRESHOLD = 50
#: Above this many sources × destinations only exact renames are detected (git's rename limit).
SIMILARITY_PAIR_LIMIT = 1000 * 1000
_CHUNK = 64
#: git's chunks: a line with its newline, cut every 64 bytes (the last line may lack the newline).
_CHUNKS = re.compile(rb"[^\n]{0,%d}\n|[^\n]{%d}|[^\n]+\Z" % (_CHUNK - 1, _CHUNK))


def diff_with_renames(
    store: TreeReader, old_tree: ObjectId | None, new_tree: ObjectId | None, *, threshold: int = DEFAULT_THRESHOLD
) -> list[FileChange]:
    """``diff_trees`` followed by :func:`detect_renames`: what ``git diff-tree -r -M`` reports."""
    return detect_renames(store, diff_trees(store, old_tree, new_tree), threshold=threshold)


def detect_renames(
    store: TreeReader, changes: Sequence[Change], *, threshold: int = DEFAULT_THRESHOLD
) -> list[FileChange]:
    """Pair deleted with added files: identical blobs first, then similar content.

    Returns every change, sorted by (new) path; a pair becomes one :class:`~engine.trees.Renamed`
    whose ``similarity`` is a percentage (100 for an exact rename). The other records are the
    ones given.
    """
    deleted = [c for c in changes if isinstance(c, Deleted) and _renamable(c.old)]
    added = [c for c in changes if isinstance(c, Added) and _renamable(c.new)]
    pairs: dict[str, tuple[Deleted, int]] = {}  # added path -> (deleted change, similarity)
    if deleted and added:
        used = _exact(deleted, added, pairs)
        rest_deleted = [c for c in deleted if c.path not in used]
        rest_added = [c for c in added if c.path not in pairs]
        if rest_deleted and rest_added and len(rest_deleted) * len(rest_added) <= SIMILARITY_PAIR_LIMIT:
            _similar(store, rest_deleted, rest_added, threshold, pairs)
    renamed_from = {source.path for source, _ in pairs.values()}
    out: list[FileChange] = []
    for change in changes:
        if isinstance(change, Deleted) and change.path in renamed_from:
            continue
        if isinstance(change, Added) and change.path in pairs:
            source, score = pairs[change.path]
            out.append(Renamed(change.path, source.path, source.old, change.new, score))
        else:
            out.append(change)
    out.sort(key=lambda fc: fc.path)
    return out


def _renamable(entry: Entry | None) -> bool:
    return entry is not None and entry.mode not in (MODE_TREE, MODE_GITLINK)


def _basename(path: str) -> str:
    return path.rpartition("/")[2]


def _exact(deleted: list[Deleted], added: list[Added], pairs: dict[str, tuple[Deleted, int]]) -> set[str]:
    """Pair identical blobs; among several candidates prefer the same file name (as git does)."""
    by_blob: dict[ObjectId, list[Deleted]] = defaultdict(list)
    for deletion in deleted:
        by_blob[deletion.old.id].append(deletion)
    used: set[str] = set()
    for same_name_only in (True, False):
        for addition in added:
            if addition.path in pairs:
                continue
            name = _basename(addition.path)
            for source in by_blob.get(addition.new.id, ()):
                if source.path not in used and (not same_name_only or _basename(source.path) == name):
                    used.add(source.path)
                    pairs[addition.path] = (source, 100)
                    break
    return used


def chunk_signature(data: bytes) -> tuple[dict[int, int], int]:
    """``{chunk hash: bytes}`` and the total size, content cut as git's diffcore-delta cuts it."""
    # The chunks cut and counted in C; only each distinct chunk is seen by Python.
    return {hash(chunk): len(chunk) * times for chunk, times in Counter(_CHUNKS.findall(data)).items()}, len(data)


def similarity(a: bytes, b: bytes) -> int:
    """Percentage similarity of two contents by git's measure."""
    sig_a, size_a = chunk_signature(a)
    sig_b, size_b = chunk_signature(b)
    largest = max(size_a, size_b)
    if largest == 0:
        return 100
    shared = sum(min(n, sig_b.get(h, 0)) for h, n in sig_a.items())
    return shared * 100 // largest


def _similar(
    store: TreeReader, deleted: list[Deleted], added: list[Added], threshold: int, pairs: dict[str, tuple[Deleted, int]]
) -> None:
    """Score the candidate pairs; assign the best scores first.

    The bytes two files share are at most the smaller file's size, so a pair whose sizes differ
    more than the threshold allows cannot reach it (git's diffcore-rename skips such pairs as
    well): each source is compared only with the destinations in its size window (a range of
    the destinations sorted by size), by the chunks both hold.
    """
    destinations: list[tuple[dict[int, int], int, int]] = []
    for d, addition in enumerate(added):
        signature, size = chunk_signature(store.read_blob(addition.new.id))
        destinations.append((signature, size, d))
    destinations.sort(key=lambda item: item[1])
    sizes = [size for _signature, size, _d in destinations]
    candidates: list[tuple[int, int, int]] = []
    for s, deletion in enumerate(deleted):
        signature, size = chunk_signature(store.read_blob(deletion.old.id))
        low = bisect_left(sizes, -(-size * threshold // 100))  # other * 100 >= threshold * size
        high = bisect_right(sizes, size * 100 // threshold) if threshold > 0 else len(sizes)
        keys = signature.keys()
        for other, other_size, d in destinations[low:high]:
            common = 0
            for h in keys & other.keys():
                n, m = signature[h], other[h]
                common += n if n < m else m
            if not common:
                continue  # nothing shared: never a rename, whatever the threshold
            score = common * 100 // max(size, other_size)
            if score >= threshold:
                candidates.append((-score, s, d))  # best score first, then source/destination order
    candidates.sort()
    used_sources: set[int] = set()
    used_destinations: set[int] = set()
    for negative_score, s, d in candidates:
        if s in used_sources or d in used_destinations:
            continue
        used_sources.add(s)
        used_destinations.add(d)
        pairs[added[d].path] = (deleted[s], -negative_score)
