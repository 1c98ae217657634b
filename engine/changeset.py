"""Building changesets: an operation list applied to a parent, new trees only along changed paths.

A changeset is a git commit. Its operations (write / delete / rename) are validated as a
whole against the parent tree before anything is written: a refused list leaves nothing in
the store. Every path appears in at most one operation, so the order of operations never
matters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .errors import EngineError, InvalidOperation, ObjectMissing, UnsafePath
from .objects import (
    BLOB,
    COMMIT,
    EMPTY_TREE_ID,
    MODE_FILE,
    MODE_TREE,
    WRITABLE_MODES,
    Commit,
    Entry,
    ObjectId,
    Signature,
    Tree,
    check_object_id,
    split_path,
)
from .store import ObjectBatch, ObjectStore
from .trees import lookup_segments


@dataclass(frozen=True)
class Write:
    """Create or overwrite the file at ``path`` with an existing blob."""

    path: str
    blob: ObjectId
    mode: int = MODE_FILE


@dataclass(frozen=True)
class Delete:
    """Remove the file at ``path``."""

    path: str


@dataclass(frozen=True)
class Rename:
    """Move the file at ``source`` to ``target`` (which must not exist), keeping its content."""

    source: str
    target: str


Operation = Write | Delete | Rename


# ----------------------------------------------------------------------- applying entries


@dataclass
class _Node:
    """Pending changes inside one directory: entries set or removed, and subdirectories."""

    entries: dict[str, Entry | None] = field(default_factory=dict)
    children: dict[str, _Node] = field(default_factory=dict)


def apply_changes(batch: ObjectBatch, tree_id: ObjectId | None, changes: Mapping[str, Entry | None]) -> ObjectId:
    """Apply ``path -> entry`` (None deletes) to a tree; write the new trees into ``batch``.

    Paths must already be validated. Directories left empty disappear, as in git. Returns the
    new root tree id (the empty tree's id when nothing is left).
    """
    root = _Node()
    for path, entry in changes.items():
        *dirs, name = path.split("/")
        node = root
        for segment in dirs:
            node = node.children.setdefault(segment, _Node())
        node.entries[name] = entry
    new_id = _rebuild(batch, tree_id, root)
    if new_id is None:
        batch.add_tree(Tree())
        return EMPTY_TREE_ID
    return new_id


def _rebuild(batch: ObjectBatch, tree_id: ObjectId | None, node: _Node) -> ObjectId | None:
    tree = Tree(batch.read_tree(tree_id)) if tree_id else Tree()
    # Removals first, so "delete a; write a/b" can turn a file into a directory.
    for name, entry in node.entries.items():
        if entry is None:
            tree.pop(name, None)
    for name, child in node.children.items():
        existing = tree.get(name)
        sub_id = existing.id if existing is not None and existing.mode == MODE_TREE else None
        new_sub = _rebuild(batch, sub_id, child)
        if new_sub is None:
            tree.pop(name, None)
        else:
            tree[name] = Entry(MODE_TREE, new_sub)
    for name, entry in node.entries.items():
        if entry is not None:
            tree[name] = entry
    if not tree:
        return None
    return batch.add_tree(tree)


# ----------------------------------------------------------------------- operations

_Refuse = Callable[[type, int, str, str], None]


def resolve_operations(
    batch: ObjectBatch, tree_id: ObjectId | None, operations: Sequence[Operation]
) -> dict[str, Entry | None]:
    """Validate ``operations`` against the tree and return them as ``path -> entry`` changes.

    Every problem is collected into the raised error's ``details`` (one dict per problem with
    ``index``, ``path``, ``code`` and ``message``); the error's own class is that of the
    first problem, so a single unsafe path raises ``UnsafePath``.
    """
    problems: list[tuple[type[EngineError], dict[str, object]]] = []

    def refuse(kind: type[EngineError], index: int, path: str, message: str) -> None:
        problems.append((kind, {"index": index, "path": path, "code": kind.code, "message": message}))

    changes: dict[str, Entry | None] = {}
    touched: dict[str, int] = {}
    split: dict[str, list[str]] = {}

    def claim(index: int, path: str, *, creates: bool = False) -> list[str] | None:
        try:
            segments = split_path(path)
        except EngineError as exc:
            refuse(type(exc), index, str(path), exc.message)
            return None
        if creates and "\\" in path:
            # The escaped form names what a history already holds (engine.objects); a new name
            # with a backslash or bytes that are not UTF-8 is one no client checks out safely.
            refuse(UnsafePath, index, path, "a path written may not contain a backslash or bytes that are not UTF-8")
            return None
        if path in touched:
            refuse(InvalidOperation, index, path, f"path is also used by operation {touched[path]}")
            return None
        touched[path] = index
        split[path] = segments
        return segments

    def existing(segments: list[str]) -> Entry | None:
        return lookup_segments(batch, tree_id, segments)

    for index, op in enumerate(operations):
        if isinstance(op, Write):
            segments = claim(index, op.path, creates=True)
            if segments is None:
                continue
            try:
                check_object_id(op.blob)
            except EngineError as exc:
                refuse(type(exc), index, op.path, exc.message)
                continue
            if op.mode not in WRITABLE_MODES:
                refuse(InvalidOperation, index, op.path, f"mode {op.mode:o} cannot be written")
                continue
            if not batch.contains(op.blob):
                refuse(ObjectMissing, index, op.path, f"blob {op.blob} is not in the store")
                continue
            current = existing(segments)
            if current is not None and current.mode == MODE_TREE:
                refuse(InvalidOperation, index, op.path, "a directory exists at this path")
                continue
            changes[op.path] = Entry(op.mode, op.blob)
        elif isinstance(op, Delete):
            segments = claim(index, op.path)
            if segments is None:
                continue
            current = existing(segments)
            if current is None:
                refuse(InvalidOperation, index, op.path, "no file at this path to delete")
            elif current.mode == MODE_TREE:
                refuse(InvalidOperation, index, op.path, "cannot delete a directory; delete its files")
            else:
                changes[op.path] = None
        elif isinstance(op, Rename):
            source_segments = claim(index, op.source)
            target_segments = claim(index, op.target, creates=True)
            if source_segments is None or target_segments is None:
                continue
            current = existing(source_segments)
            if current is None or current.mode == MODE_TREE:
                refuse(InvalidOperation, index, op.source, "no file at the rename source")
                continue
            if existing(target_segments) is not None:
                refuse(InvalidOperation, index, op.target, "the rename target already exists")
                continue
            changes[op.source] = None
            changes[op.target] = current
        else:
            refuse(InvalidOperation, index, "", f"unknown operation {op!r}")

    if not problems:
        _check_file_directory_clashes(batch, tree_id, changes, split, touched, refuse)
    if problems:
        kind, first = problems[0]
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise kind(
            f"operation {first['index']} ({first['path']}): {first['message']}{more}",
            details=[detail for _, detail in problems],
        )
    return changes


def _check_file_directory_clashes(
    batch: ObjectBatch,
    tree_id: ObjectId | None,
    changes: dict[str, Entry | None],
    split: dict[str, list[str]],
    touched: dict[str, int],
    refuse: _Refuse,
) -> None:
    """A new file may not sit under a path that stays a file, nor be a prefix of another new file."""
    created = {path for path, entry in changes.items() if entry is not None}
    for path in sorted(created):
        segments = split[path]
        for depth in range(1, len(segments)):
            prefix = "/".join(segments[:depth])
            if prefix in created:
                refuse(InvalidOperation, touched[path], path, f"{prefix} is written as a file in this changeset")
                break
            if prefix in changes:
                continue  # the file at the prefix is removed by this changeset
            entry = lookup_segments(batch, tree_id, segments[:depth])
            if entry is None:
                break
            if entry.mode != MODE_TREE:
                refuse(InvalidOperation, touched[path], path, f"{prefix} is a file")
                break


def create_changeset(
    store: ObjectStore,
    parent: ObjectId | None,
    operations: Sequence[Operation],
    *,
    message: str,
    author: Signature,
    committer: Signature | None = None,
    blobs: Sequence[bytes] = (),
    merged: Sequence[ObjectId] = (),
) -> ObjectId:
    """Build a commit on ``parent`` from ``operations``; write its trees and itself in one batch.

    ``merged`` are further parents (a merge changeset): the operations still apply to the
    first parent's tree, so an agent's own merge names what it changed relative to it.

    ``blobs`` are new file contents the operations may name (by their ids); they are written
    in the same batch, so a refused changeset leaves none of them behind.

    Raises (nothing written): ``InvalidObjectId``/``ObjectMissing``/``WrongObjectType`` for a
    bad parent; ``UnsafePath``/``InvalidOperation``/``ObjectMissing`` for bad operations.
    """
    batch = ObjectBatch(store)
    for data in blobs:
        batch.add(BLOB, data)
    base_tree = None
    parents: tuple[ObjectId, ...] = ()
    if parent is not None:
        base_tree = store.read_commit(check_object_id(parent)).tree
        parents = (parent,)
    for other in merged:
        store.read_commit(check_object_id(other))  # InvalidObjectId / ObjectMissing / WrongObjectType
        if other in parents:
            raise InvalidOperation(f"the parent {other} is named twice")
        parents = (*parents, other)
    changes = resolve_operations(batch, base_tree, operations)
    if changes or base_tree is None:
        tree = apply_changes(batch, base_tree, changes)
    else:
        tree = base_tree
    commit_id = batch.add_commit(Commit(tree, parents, author, committer or author, message))
    batch.flush()
    return commit_id


def create_commit(
    store: ObjectStore,
    tree: ObjectId,
    parents: Sequence[ObjectId],
    *,
    message: str,
    author: Signature,
    committer: Signature | None = None,
) -> ObjectId:
    """Write a commit for an existing tree (for imports, whose trees are built separately)."""
    for oid in (tree, *parents):
        if not store.contains(check_object_id(oid)):
            raise ObjectMissing.for_id(oid)
    return store.add(COMMIT, Commit(tree, tuple(parents), author, committer or author, message).encode())
