"""Reading history: tree, file, diff, blame and log, shaped as API.md answers them."""

from __future__ import annotations

from patiencediff import PatienceSequenceMatcher

from engine import history
from engine.errors import WrongObjectType
from engine.objects import MODE_GITLINK, MODE_TREE, Entry, is_binary, is_object_id, split_path
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
    fromfile = f"a/{old_path}" if old is not None else "/dev/null"
    tofile = f"b/{change.path}" if new is not None else "/dev/null"
    if is_binary(old_data) or is_binary(new_data) or max(len(old_data), len(new_data)) > MAX_PATCH_FILE_BYTES:
        return header + f"Binary files {fromfile} and {tofile} differ\n"  # git's line: /dev/null for a side absent
    return header + unified_patch(old_data, new_data, fromfile, tofile)


def unified_patch(old_data: bytes, new_data: bytes, fromfile: str, tofile: str, context: int = 3) -> str:
    """A unified diff of two contents (as ``difflib.unified_diff`` writes it, and git's marker
    after a last line without its newline), its lines matched by patience diff.

    Only the lines from the first to the last that differ are matched: the common lines before
    and after them are found by comparing bytes (in C), as git's xdiff trims them, and count as
    equal; of those, only the ``context`` lines a hunk can show are split. Lines are matched and
    written as bytes and decoded once (invalid UTF-8 replaced). Decoding every line first and
    diffing whole files with difflib's pure-Python matcher was three quarters of a
    500-changeset diff (docs/performance.md).
    """
    first, old_last, new_last = _changed_span(old_data, new_data)
    start, old_end = first, old_last
    for _ in range(context):  # the context lines either side, all that a hunk can show of them
        if start:
            start = old_data.rfind(b"\n", 0, start - 1) + 1
        if old_end < len(old_data):
            old_end = old_data.find(b"\n", old_end) + 1 or len(old_data)
    new_end = len(new_data) - (len(old_data) - old_end)
    offset = old_data.count(b"\n", 0, start)  # the lines before, the same on both sides
    old, new = _lines(old_data[start:old_end]), _lines(new_data[start:new_end])
    before = old_data.count(b"\n", start, first)
    after = len(_lines(old_data[old_last:old_end]))  # the same bytes on both sides
    old_stop, new_stop = len(old) - after, len(new) - after
    codes: list[Opcode] = [("equal", 0, before, 0, before)]
    for matched, a1, a2, b1, b2 in PatienceSequenceMatcher(
        None, old[before:old_stop], new[before:new_stop]
    ).get_opcodes():
        codes.append((matched, a1 + before, a2 + before, b1 + before, b2 + before))
    codes.append(("equal", old_stop, len(old), new_stop, len(new)))
    body: list[bytes] = []
    add = body.append
    for group in _hunks(codes, context):
        head, tail = group[0], group[-1]
        old_range = _hunk_range(offset + head[1], offset + tail[2])
        add(b"@@ -%s +%s @@\n" % (old_range, _hunk_range(offset + head[3], offset + tail[4])))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                add(_prefixed(b" ", old[i1:i2]))
                continue
            if tag in ("replace", "delete"):
                add(_prefixed(b"-", old[i1:i2]))
            if tag in ("replace", "insert"):
                add(_prefixed(b"+", new[j1:j2]))
    if not body:
        return ""
    return f"--- {fromfile}\n+++ {tofile}\n" + b"".join(body).decode("utf-8", "replace")


#: ``(tag, old start, old stop, new start, new stop)``, as ``difflib.SequenceMatcher`` gives them.
Opcode = tuple[str, int, int, int, int]


def _hunks(codes: list[Opcode], context: int) -> list[list[Opcode]]:
    """The opcodes grouped into hunks with ``context`` equal lines around the changes, as
    ``difflib.SequenceMatcher.get_grouped_opcodes`` groups its own (adjacent equal runs joined first)."""
    joined: list[Opcode] = []
    for code in codes:
        if code[1] == code[2] and code[3] == code[4]:
            continue
        if joined and code[0] == "equal" == joined[-1][0]:
            joined[-1] = ("equal", joined[-1][1], code[2], joined[-1][3], code[4])
        else:
            joined.append(code)
    if not joined:
        return []
    tag, i1, i2, j1, j2 = joined[0]
    if tag == "equal":
        joined[0] = (tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2)
    tag, i1, i2, j1, j2 = joined[-1]
    if tag == "equal":
        joined[-1] = (tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context))
    hunks: list[list[Opcode]] = []
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in joined:
        if tag == "equal" and i2 - i1 > 2 * context:  # a long equal run ends a hunk
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            hunks.append(group)
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        hunks.append(group)
    return hunks


def _changed_span(old: bytes, new: bytes) -> tuple[int, int, int]:
    """``(start, old end, new end)``: byte offsets of the whole lines from the first that differs
    to the last that differs. What lies outside is the same on both sides (a common prefix of
    whole lines, and a common suffix of whole lines after it)."""
    low, high = 0, min(len(old), len(new))
    while low < high:  # the longest common prefix, by halves: each comparison is a memcmp
        middle = (low + high + 1) // 2
        if old[:middle] == new[:middle]:
            low = middle
        else:
            high = middle - 1
    start = old.rfind(b"\n", 0, low) + 1  # back to the start of its line
    low, high = 0, min(len(old), len(new)) - start
    while low < high:  # the longest common suffix of what follows
        middle = (low + high + 1) // 2
        if old[len(old) - middle :] == new[len(new) - middle :]:
            low = middle
        else:
            high = middle - 1
    old_end, new_end = len(old) - low, len(new) - low
    newline = ord("\n")
    if not (old_end == start or old[old_end - 1] == newline) or not (new_end == start or new[new_end - 1] == newline):
        # Mid-line on a side: on to the end of a line inside the common suffix (the same on both).
        old_end = old.find(b"\n", old_end) + 1 or len(old)
        new_end = len(new) - (len(old) - old_end)
    return start, old_end, new_end


def _lines(data: bytes) -> list[bytes]:
    """The lines of ``data`` without their newlines (one split, in C), except a last line that
    has none: it keeps a ``\n`` that no other element can hold, so that matching tells it from
    the same text with a newline, as git does, and the patch marks it."""
    lines = data.split(b"\n")
    if lines[-1]:
        lines[-1] += b"\n"
    else:
        lines.pop()
    return lines


def _prefixed(prefix: bytes, lines: list[bytes]) -> bytes:
    """The lines of a hunk (as :func:`_lines` gives them), each after ``prefix`` and with its
    newline (one join, in C), and git's marker after a last line that has no newline."""
    if not lines:
        return b""
    if lines[-1].endswith(b"\n"):  # the file's last line, without a newline
        return prefix + (b"\n" + prefix).join([*lines[:-1], lines[-1][:-1]]) + b"\n\\ No newline at end of file\n"
    return prefix + (b"\n" + prefix).join(lines) + b"\n"


def _hunk_range(start: int, stop: int) -> bytes:
    """``start,length`` of a hunk header, 1-based, as difflib and git write it."""
    length = stop - start
    if length == 1:
        return b"%d" % (start + 1)
    return b"%d,%d" % (start if length == 0 else start + 1, length)


def _patch_content(store: TreeReader, entry: Entry | None) -> bytes:
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
    return [
        {"number": line.number, "changeset": line.changeset, "text": line.text, "path": line.path} for line in lines
    ]


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
