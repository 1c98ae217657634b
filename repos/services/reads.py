"""Reading history: tree, file, diff, blame and log, shaped as API.md answers them."""

from __future__ import annotations

from patiencediff import PatienceSequenceMatcher

from engine import history
from engine.errors import WrongObjectType
from engine.objects import MODE_GITLINK, MODE_TREE, Entry, is_binary, is_object_id, split_lines, split_path
from engine.renames import diff_with_renames
from engine.store import ObjectStore
from engine.trees import Added, Deleted, FileChange, Renamed, TreeReader, lookup, subtree

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
            "type": "dir" if entry.mode == MODE_TREE else "file",
            "id": entry.id,
            "mode": f"{entry.mode:06o}",
        }
        for name, entry in sorted(entries.items())
    ]


def read_file(repository: Repository, rev: str, path: str) -> bytes:
    """The bytes of the file at ``path`` in the changeset ``rev``."""
    store = store_for(repository.name)
    commit = store.read_commit(resolve_rev(repository, rev))
    entry = lookup(store, commit.tree, path)
    if entry is None:
        raise NotFound(f"no file {path!r} at {rev}")
    if entry.mode == MODE_TREE:
        raise NotFound(f"{path!r} is a directory, not a file, at {rev}: list it with the tree endpoint")
    return store.read_blob(entry.id)


def diff(repository: Repository, from_rev: str, to_rev: str) -> dict:
    """The changes between two changesets, renames detected, with a unified patch."""
    store = store_for(repository.name)
    old = store.read_commit(resolve_rev(repository, from_rev)).tree
    new = store.read_commit(resolve_rev(repository, to_rev)).tree
    changes = []
    patch = []
    reader = _BlobsOnce(store)
    found = diff_with_renames(reader, old, new)
    reader.remember = False  # what rename detection read is handed to the patches, once each
    for change in found:
        item: dict[str, object] = {"status": change.status, "path": change.path}
        if isinstance(change, Renamed):
            item["old_path"] = change.old_path
            item["similarity"] = change.similarity
        changes.append(item)
        patch.append(_file_patch(reader, change))
    return {"changes": changes, "patch": "".join(patch)}


class _BlobsOnce:
    """The store as one diff reads it: rename detection reads the added and deleted files, and
    their patches read them again; the second read takes the first one's bytes (and lets them go)."""

    def __init__(self, store: ObjectStore) -> None:
        self.read_tree = store.read_tree
        self._read_blob = store.read_blob
        self._blobs: dict[str, bytes] = {}
        self.remember = True

    def read_blob(self, oid: str) -> bytes:
        data = self._blobs.pop(oid, None)
        if data is None:
            data = self._read_blob(oid)
            if self.remember:
                self._blobs[oid] = data
        return data


def _file_patch(store: TreeReader, change: FileChange) -> str:
    old = None if isinstance(change, Added) else change.old
    new = None if isinstance(change, Deleted) else change.new
    old_path = change.old_path if isinstance(change, Renamed) else change.path
    old_data = _patch_content(store, old)
    new_data = _patch_content(store, new)
    header = f"diff --git a/{old_path} b/{change.path}\n"
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
    fromfile = f"a/{old_path}" if old is not None else "/dev/null"
    tofile = f"b/{change.path}" if new is not None else "/dev/null"
    return header + unified_patch(split_lines(old_data), split_lines(new_data), fromfile, tofile)


def unified_patch(old: list[bytes], new: list[bytes], fromfile: str, tofile: str, context: int = 3) -> str:
    """A unified diff of two lists of lines (as ``difflib.unified_diff`` writes it, and git's
    marker after a last line without its newline), matched by patience diff.

    Lines are matched and written as bytes and decoded once (invalid UTF-8 replaced), and only
    the lines of the hunks are touched: decoding every line first and diffing with difflib's
    pure-Python matcher was three quarters of a 500-changeset diff (docs/performance.md).
    """
    body: list[bytes] = []
    add = body.append
    old_out, new_out = _written(old), _written(new)
    for group in PatienceSequenceMatcher(None, old, new).get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        add(b"@@ -%s +%s @@\n" % (_hunk_range(first[1], last[2]), _hunk_range(first[3], last[4])))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                body += [b" " + line for line in old_out[i1:i2]]
                continue
            if tag in ("replace", "delete"):
                body += [b"-" + line for line in old_out[i1:i2]]
            if tag in ("replace", "insert"):
                body += [b"+" + line for line in new_out[j1:j2]]
    if not body:
        return ""
    return f"--- {fromfile}\n+++ {tofile}\n" + b"".join(body).decode("utf-8", "replace")


def _written(lines: list[bytes]) -> list[bytes]:
    """The lines as the patch writes them: a last line without its newline gets git's marker
    (matching still sees it bare: it differs from the same line with a newline, as in git)."""
    if not lines or lines[-1].endswith(b"\n"):
        return lines
    return [*lines[:-1], lines[-1] + b"\n\\ No newline at end of file\n"]


def _hunk_range(start: int, stop: int) -> bytes:
    """``start,length`` of a hunk header, 1-based, as difflib and git write it."""
    length = stop - start
    if length == 1:
        return b"%d" % (start + 1)
    return b"%d,%d" % (start if length == 0 else start + 1, length)


def _patch_content(store: TreeReader, entry: Entry | None) -> bytes:
    # A side that is absent, or a submodule (a commit id, not content), has no lines.
    return store.read_blob(entry.id) if entry is not None and entry.mode != MODE_GITLINK else b""


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
