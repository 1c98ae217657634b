"""Reading trees: path lookup, walking files, the pruned tree diff, and its change records.

Every function here costs what the paths it touches cost: a lookup reads one tree per path
segment, and a diff descends only into subtrees whose ids differ.

A change record is one of four classes, told apart by ``isinstance`` or by their ``status``
literal (what the API reports), each with exactly the fields its kind has:

===========  =======================================  ==========================================
``status``   class                                    fields
===========  =======================================  ==========================================
added        :class:`Added`                           ``path``, ``new``
deleted      :class:`Deleted`                         ``path``, ``old``
modified     :class:`Modified`                        ``path``, ``old``, ``new``
renamed      :class:`Renamed` (engine.renames only)   ``path`` (the new one), ``old_path``,
                                                      ``old``, ``new``, ``similarity`` (%)
===========  =======================================  ==========================================

:func:`diff_trees` returns :data:`Change` records (no renames: git's ``diff-tree -r``);
engine.renames pairs deletions with additions into :data:`FileChange` records (``-M``).
Treat records as immutable. They are slotted dataclasses, not frozen ones: a diff builds one per
changed file, and a frozen dataclass costs twice what the NamedTuple it replaced did to build
(measured: 1.2 µs against 0.6 µs for a rename record; unfrozen, 0.34 µs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from .errors import PathNotFound, WrongObjectType
from .objects import MODE_TREE, Entry, ObjectId, Tree, split_path


class TreeReader(Protocol):
    """Anything that reads parsed trees and blobs: an ObjectStore or an ObjectBatch."""

    def read_tree(self, oid: ObjectId) -> Tree: ...

    def read_blob(self, oid: ObjectId) -> bytes: ...


@dataclass(slots=True)
class Added:
    """A file only the new tree has."""

    status: ClassVar[Literal["added"]] = "added"
    path: str
    new: Entry


@dataclass(slots=True)
class Deleted:
    """A file only the old tree has."""

    status: ClassVar[Literal["deleted"]] = "deleted"
    path: str
    old: Entry


@dataclass(slots=True)
class Modified:
    """A file both trees have, with a different mode or content."""

    status: ClassVar[Literal["modified"]] = "modified"
    path: str
    old: Entry
    new: Entry


@dataclass(slots=True)
class Renamed:
    """A file deleted at ``old_path`` and added at ``path`` with ``similarity`` % of its content
    (100: the same blob), as engine.renames pairs them."""

    status: ClassVar[Literal["renamed"]] = "renamed"
    path: str
    old_path: str
    old: Entry
    new: Entry
    similarity: int


#: What :func:`diff_trees` reports for one file.
Change = Added | Deleted | Modified
#: What a diff with rename detection reports for one file (engine.renames).
FileChange = Added | Deleted | Modified | Renamed


#: The side of a diff that has no tree.
_EMPTY: Mapping[str, Entry] = Tree()


def lookup(store: TreeReader, tree_id: ObjectId | None, path: str) -> Entry | None:
    """The entry at ``path`` in the tree, or None if nothing is there.

    A path that runs through a file (``a.txt/b``) is simply absent.
    """
    return lookup_segments(store, tree_id, split_path(path))


def lookup_segments(store: TreeReader, tree_id: ObjectId | None, segments: list[str]) -> Entry | None:
    """:func:`lookup` for a path already split and validated (hot loops: blame, log)."""
    if tree_id is None:
        return None
    entry: Entry | None = Entry(MODE_TREE, tree_id)
    for segment in segments:
        if entry is None or entry.mode != MODE_TREE:
            return None
        entry = store.read_tree(entry.id).get(segment)
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
    old_tree: Mapping[str, Entry] = store.read_tree(old) if old else _EMPTY
    new_tree: Mapping[str, Entry] = store.read_tree(new) if new else _EMPTY
    # Only the names whose entries differ are sorted and visited: a directory of 100 entries
    # with one change costs one set operation in C, not 100 steps in Python.
    changed = {name for name, _ in old_tree.items() ^ new_tree.items()}
    for name in sorted(changed, key=lambda n: _git_order(n, new_tree, old_tree)):
        a = old_tree.get(name)
        b = new_tree.get(name)
        path = prefix + name
        a_dir = a.id if a is not None and a.mode == MODE_TREE else None
        b_dir = b.id if b is not None and b.mode == MODE_TREE else None
        if a_dir and b_dir:
            _diff_into(store, a_dir, b_dir, path + "/", out)
            continue
        a_file = None if a_dir else a
        b_file = None if b_dir else b
        if a_file is not None and b_file is not None:
            out.append(Modified(path, a_file, b_file))
            continue
        # Added, deleted, or a file <-> directory switch.
        if a_dir:
            _diff_into(store, a_dir, None, path + "/", out)
        elif a_file is not None:
            out.append(Deleted(path, a_file))
        if b_dir:
            _diff_into(store, None, b_dir, path + "/", out)
        elif b_file is not None:
            out.append(Added(path, b_file))


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
        a_tree: Mapping[str, Entry] = store.read_tree(a_id) if a_id else _EMPTY
        b_tree: Mapping[str, Entry] = store.read_tree(b_id) if b_id else _EMPTY
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
