"""Reading history: tree, file, diff, blame and log, shaped as API.md answers them."""

from __future__ import annotations

import difflib

from engine import history
from engine.errors import WrongObjectType
from engine.objects import MODE_GITLINK, MODE_TREE, Entry, is_binary, is_object_id, split_lines, split_path
from engine.renames import diff_with_renames
from engine.store import ObjectStore
from engine.trees import Added, Deleted, FileChange, Renamed, lookup, subtree

from ..errors import Invalid, NotFound
from ..models import Repository
from . import derived
from .repositories import get_stream, resolve_rev
from .stores import store_for

MAX_LOG_LIMIT = 500


DEFAULT_LOG_LIMIT = 50
#: Files above this size are listed in a diff but not spelled out in its patch.
MAX_PATCH_FILE_BYTES = 1024 * 1024


def tree(repository: Repository, rev: str, path: str | None = None) -> list[dict]:
    """The entries of the directory at ``path`` (the root when empty) in the changeset ``rev``."""
    store = store_for(repository.name)
    commit = store.read_commit(resolve_rev(repository, rev))
    prefix = path or ""
    try:
        entries = subtree(store, commit.tree, prefix or None)
    except WrongObjectType:
        raise NotFound(f"{prefix!r} is a file, not a directory, at {rev}") from None
    base = prefix + "/" if prefix else ""
    return [
        {
            "name": name,
            "path": base + name,
            "type": _ENTRY_TYPES.get(entry.mode, "file"),
            "id": entry.id,
            "mode": f"{entry.mode:06o}",
        }
        for name, entry in sorted(entries.items())
    ]


#: What a tree entry is, by its mode: a symlink is a file whose bytes are its target, and a
#: submodule names a commit of another repository (never fetched).
_ENTRY_TYPES = {MODE_TREE: "dir", MODE_GITLINK: "submodule"}


def read_file(repository: Repository, rev: str, path: str) -> bytes:
    """The bytes of the file at ``path`` in the changeset ``rev``."""
    store = store_for(repository.name)
    commit = store.read_commit(resolve_rev(repository, rev))
    entry = lookup(store, commit.tree, path)
    if entry is None:
        raise NotFound(f"no file {path!r} at {rev}")
    if entry.mode == MODE_TREE:
        raise NotFound(f"{path!r} is a directory, not a file, at {rev}: list it with the tree endpoint")
    if entry.mode == MODE_GITLINK:
        raise NotFound(f"{path!r} is a submodule (commit {entry.id} of another repository), not a file, at {rev}")
    return store.read_blob(entry.id)


def diff(repository: Repository, from_rev: str, to_rev: str) -> dict:
    """The changes between two changesets, renames detected, with a unified patch."""
    store = store_for(repository.name)
    old = store.read_commit(resolve_rev(repository, from_rev)).tree
    new = store.read_commit(resolve_rev(repository, to_rev)).tree
    changes = []
    patch = []
    for change in diff_with_renames(store, old, new):
        item: dict[str, object] = {"status": change.status, "path": change.path}
        if isinstance(change, Renamed):
            item["old_path"] = change.old_path
            item["similarity"] = change.similarity
        changes.append(item)
        patch.append(_file_patch(store, change))
    return {"changes": changes, "patch": "".join(patch)}


def _file_patch(store: ObjectStore, change: FileChange) -> str:
    old = None if isinstance(change, Added) else change.old
    new = None if isinstance(change, Deleted) else change.new
    old_path = change.old_path if isinstance(change, Renamed) else change.path
    old_data = _patch_content(store, old)
    new_data = _patch_content(store, new)
    header = f"diff --git a/{old_path} b/{change.path}\n"
    if old is not None and new is not None and old.mode != new.mode:
        header += f"old mode {old.mode:06o}\nnew mode {new.mode:06o}\n"
    if isinstance(change, Renamed):
        header += f"similarity index {change.similarity}%\nrename from {old_path}\nrename to {change.path}\n"
    elif isinstance(change, Added):
        header += f"new file mode {change.new.mode:06o}\n"
    elif isinstance(change, Deleted):
        header += f"deleted file mode {change.old.mode:06o}\n"
    if old_data == new_data:
        return header
    if is_binary(old_data) or is_binary(new_data) or max(len(old_data), len(new_data)) > MAX_PATCH_FILE_BYTES:
        return header + f"Binary files a/{old_path} and b/{change.path} differ\n"
    old_lines = [line.decode("utf-8", "replace") for line in split_lines(old_data)]
    new_lines = [line.decode("utf-8", "replace") for line in split_lines(new_data)]
    fromfile = f"a/{old_path}" if old is not None else "/dev/null"
    tofile = f"b/{change.path}" if new is not None else "/dev/null"
    body = []
    for line in difflib.unified_diff(old_lines, new_lines, fromfile, tofile):
        body.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return header + "".join(body)


def _patch_content(store: ObjectStore, entry: Entry | None) -> bytes:
    # A side that is absent has no lines; a submodule (a commit of another repository, not
    # content here) has the one line git's diff gives it.
    if entry is None:
        return b""
    if entry.mode == MODE_GITLINK:
        return b"Subproject commit %s\n" % entry.id.encode()
    return store.read_blob(entry.id)


def blame(repository: Repository, rev: str, path: str) -> list[dict]:
    store = store_for(repository.name)
    index = derived.path_index(repository, store)
    try:
        lines = history.blame(store, resolve_rev(repository, rev), path, index=index)
    except WrongObjectType:
        raise NotFound(f"{path!r} is not a file at {rev}") from None
    return [{"number": line.number, "changeset": line.changeset, "text": line.text} for line in lines]


def log(
    repository: Repository,
    rev: str | None,
    path: str | None = None,
    *,
    limit: int | str | None = None,
    cursor: str | None = None,
) -> dict:
    """A page of the changesets that touch ``path`` (all, without a path), newest first."""
    try:
        size = DEFAULT_LOG_LIMIT if limit in (None, "") else int(limit)
    except (TypeError, ValueError):
        raise Invalid(f"limit is a whole number, not {limit!r}") from None
    if not 1 <= size <= MAX_LOG_LIMIT:
        raise Invalid(f"limit is between 1 and {MAX_LOG_LIMIT}")
    if path:
        split_path(path)  # an unsafe path is invalid input (the engine says why)
    store = store_for(repository.name)
    start = None
    if cursor is None:
        name = rev or repository.default_stream
        if is_object_id(name):
            start = resolve_rev(repository, name)
        else:
            start = get_stream(repository, name).head
            if start is None:
                return {"changesets": [], "next": None}  # an empty stream has an empty history
    # With a path, the derived data spares the walk comparing trees at every changeset that
    # leaves the path alone (without one, a page reads only the commits it lists).
    index = derived.path_index(repository, store) if path else None
    page = history.log_page(store, start, path or None, limit=size, cursor=cursor, index=index)
    changesets = []
    for oid in page.changesets:
        commit = store.read_commit(oid)
        changesets.append(
            {
                "id": oid,
                "message": commit.message,
                "parents": list(commit.parents),
                "author": {"name": commit.author.name, "email": commit.author.email},
                "time": commit.committer.time,
            }
        )
    return {"changesets": changesets, "next": page.next}
