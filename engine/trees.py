"""Reading trees: path lookup, walking files, and the pruned tree diff.

Every function here costs what the paths it touches cost: a lookup reads one tree per path
segment, and a diff descends only into subtrees whose ids differ.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple, Protocol

from .errors import PathNotFound, WrongObjectType
from .objects import MODE_TREE, Entry, ObjectId, Tree, split_path


class TreeReader(Protocol):
    """Anything that reads parsed trees and blobs: an ObjectStore or an ObjectBatch."""

    def read_tree(self, oid: ObjectId) -> Tree: ...

    def read_blob(self, oid: ObjectId) -> bytes: ...


class Change(NamedTuple):
    """One file's change between two trees. ``old``/``new`` is None when added/deleted."""

    path: str
    old: Entry | None
    new: Entry | None

    @property
    def status(self) -> str:
        if self.old is None:
            return "added"
        if self.new is None:
            return "deleted"
        return "modified"


def lookup(store: TreeReader, tree_id: ObjectId | None, path: str) -> Entry | None:
    """The entry at ``path`` in the tree, or None if nothing is there.

    A path that runs through a file (``a.txt/b``) is simply absent.
    """
    return lookup_segments(store, tree_id, split_path(path))


def lookup_segments(store: TreeReader, tree_id: ObjectId | None, segments: list[str]) -> Entry | None:
    """:func:`lookup` for a path already split and validated (hot loops: blame, log)."""
    if tree_id is None:
        return None
    entry = Entry(MODE_TREE, tree_id)
    for segment in segments:
        if entry.mode != MODE_TREE:
            return None
        entry = store.read_tree(entry.id).get(segment)
        if entry is None:
            return None
    return entry


def subtree(store: TreeReader, tree_id: ObjectId, path: str | None) -> Tree:
    """The parsed directory at ``path`` ('' or None for the root); PathNotFound otherwise."""
    if not path:
        return store.read_tree(tree_id)
    entry = lookup(store, tree_id, path)
    if entry is None:
        raise PathNotFound(f"no such directory: {path}")
    if entry.mode != MODE_TREE:
        raise WrongObjectType(f"not a directory: {path}")
    return store.read_tree(entry.id)


def iter_files(store: TreeReader, tree_id: ObjectId | None, prefix: str = "") -> Iterator[tuple[str, Entry]]:
    """Every non-tree entry under the tree, as ``(path, entry)``, in git's path order."""
    if tree_id is None:
        return
    tree = store.read_tree(tree_id)
    for name in sorted(tree, key=lambda n: _git_order(n, tree)):
        entry = tree[name]
        path = prefix + name
        if entry.mode == MODE_TREE:
            yield from iter_files(store, entry.id, path + "/")
        else:
            yield path, entry


def _git_order(name: str, *trees: Mapping[str, Entry]) -> str:
    # git sorts a directory as if its name ended in '/'.
    for tree in trees:
        entry = tree.get(name)
        if entry is not None:
            return name + "/" if entry.mode == MODE_TREE else name
    return name


def diff_trees(store: TreeReader, old: ObjectId | None, new: ObjectId | None) -> list[Change]:
    """The files that differ between two trees, in path order.

    Identical subtrees are skipped by id, so the cost follows the change, not the tree size.
    A path that is a file on one side and a directory on the other is a deletion of the one
    and additions of everything under the other.
    """
    changes: list[Change] = []
    if old != new:
        _diff_into(store, old, new, "", changes)
    return changes


def _diff_into(store: TreeReader, old: ObjectId | None, new: ObjectId | None, prefix: str, out: list[Change]) -> None:
    old_tree = store.read_tree(old) if old else {}
    new_tree = store.read_tree(new) if new else {}
    # Only the names whose entries differ are sorted and visited: a directory of 100 entries
    # with one change costs one set operation in C, not 100 steps in Python.
    changed = {name for name, _ in old_tree.items() ^ new_tree.items()}
    for name in sorted(changed, key=lambda n: _git_order(n, new_tree, old_tree)):
        a = old_tree.get(name)
        b = new_tree.get(name)
        path = prefix + name
        a_dir = a is not None and a.mode == MODE_TREE
        b_dir = b is not None and b.mode == MODE_TREE
        if a_dir and b_dir:
            _diff_into(store, a.id, b.id, path + "/", out)
            continue
        if a is not None and not a_dir and b is not None and not b_dir:
            out.append(Change(path, a, b))
            continue
        # Added, deleted, or a file <-> directory switch.
        if a is not None:
            if a_dir:
                _diff_into(store, a.id, None, path + "/", out)
            else:
                out.append(Change(path, a, None))
        if b is not None:
            if b_dir:
                _diff_into(store, None, b.id, path + "/", out)
            else:
                out.append(Change(path, None, b))


def changed_paths(store: TreeReader, old: ObjectId | None, new: ObjectId | None, limit: int) -> set[str] | None:
    """Every path whose entry differs between two trees — files *and* the directories above
    them — or None when there are more than ``limit`` of them.

    This is what a path index records per changeset: "the entry at P differs" holds exactly
    when P is in this set (a directory differs when anything below it does, and a path that
    turned from a file into a directory differs along with everything below it). Identical
    subtrees are skipped by id, as in :func:`diff_trees`.
    """
    found: set[str] = set()
    if old == new:
        return found
    stack: list[tuple[ObjectId | None, ObjectId | None, str]] = [(old, new, "")]
    while stack:
        a_id, b_id, prefix = stack.pop()
        a_tree = store.read_tree(a_id) if a_id else {}
        b_tree = store.read_tree(b_id) if b_id else {}
        for name in {name for name, _ in a_tree.items() ^ b_tree.items()}:
            found.add(prefix + name)
            a = a_tree.get(name)
            b = b_tree.get(name)
            a_sub = a.id if a is not None and a.mode == MODE_TREE else None
            b_sub = b.id if b is not None and b.mode == MODE_TREE else None
            if a_sub or b_sub:
                stack.append((a_sub, b_sub, prefix + name + "/"))
        if len(found) > limit:
            return None
    return found
