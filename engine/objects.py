"""Git objects in SHA-1 format: ids, blobs, trees and commits, byte-for-byte as git writes them.

A changeset *is* a git commit, so everything here must hash exactly as git does:
``git fsck --strict`` accepts what we write and our ids equal git's for the same content
(both checked by the oracle tests). Object ids are 40-character lowercase hex strings.
Tree entry names are ``str`` (UTF-8, with undecodable bytes kept by ``surrogateescape``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypeGuard

from dulwich.objects import parse_tree as _parse_tree_native

from .errors import CorruptObject, InvalidInput, InvalidObjectId, UnsafePath

ObjectId = str

BLOB = "blob"
TREE = "tree"
COMMIT = "commit"
OBJECT_TYPES = (BLOB, TREE, COMMIT)

MODE_FILE = 0o100644
MODE_EXECUTABLE = 0o100755
MODE_SYMLINK = 0o120000
MODE_TREE = 0o040000
MODE_GITLINK = 0o160000
#: Modes a changeset may write for a path (trees are implied by paths; gitlinks are not ours to make).
WRITABLE_MODES = frozenset({MODE_FILE, MODE_EXECUTABLE, MODE_SYMLINK})

_HEX40 = re.compile(r"[0-9a-f]{40}\Z")
EMPTY_TREE_ID = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def is_object_id(value: object) -> TypeGuard[ObjectId]:
    """Whether ``value`` is a full lowercase 40-hex object id."""
    return isinstance(value, str) and _HEX40.match(value) is not None


def check_object_id(value: object) -> ObjectId:
    """Return ``value`` if it is a full lowercase 40-hex id, else raise :class:`InvalidObjectId`."""
    if is_object_id(value):
        return value
    raise InvalidObjectId(f"not a 40-hex object id: {value!r}")


def object_header(kind: str, size: int) -> bytes:
    return b"%s %d\x00" % (kind.encode("ascii"), size)


def hash_object(kind: str, raw: bytes) -> ObjectId:
    """The git id of an object of ``kind`` whose content (without header) is ``raw``."""
    h = hashlib.sha1(object_header(kind, len(raw)))
    h.update(raw)
    return h.hexdigest()


# ---------------------------------------------------------------------------- paths


def split_path(path: str) -> list[str]:
    """Validate a repository path and return its segments.

    Refused (``UnsafePath``): empty, absolute, trailing slash, empty segment, ``.`` or ``..``,
    a ``.git`` segment in any letter case (git itself refuses those on checkout), a NUL byte,
    and a backslash (a path separator on some clients).
    """
    if not isinstance(path, str) or not path:
        raise UnsafePath(f"empty or non-text path: {path!r}")
    if "\x00" in path:
        raise UnsafePath(f"path contains NUL: {path!r}")
    if "\\" in path:
        raise UnsafePath(f"path contains a backslash: {path!r}")
    if path.startswith("/"):
        raise UnsafePath(f"absolute path: {path!r}")
    segments = path.split("/")
    for segment in segments:
        if segment == "":
            raise UnsafePath(f"empty path segment: {path!r}")
        if segment in (".", ".."):
            raise UnsafePath(f"relative path segment {segment!r}: {path!r}")
        if segment.lower() == ".git":
            raise UnsafePath(f"'.git' path segment: {path!r}")
    return segments


# ---------------------------------------------------------------------------- trees


class Entry(NamedTuple):
    """One tree entry: its mode and the id of the blob, tree or commit it names."""

    mode: int
    id: ObjectId


class Tree(dict[str, Entry]):
    """A parsed tree: ``name -> Entry``. Treat instances read from a store as immutable."""

    __slots__ = ()


def _sort_key(item: tuple[str, Entry]) -> bytes:
    # git orders entries by name bytes, with directories compared as if they ended in '/'.
    name, entry = item
    key = name.encode("utf-8", "surrogateescape")
    return key + b"/" if entry.mode == MODE_TREE else key


def encode_tree(tree: Mapping[str, Entry]) -> bytes:
    """The canonical git serialization of ``tree``."""
    parts = []
    for name, entry in sorted(tree.items(), key=_sort_key):
        parts.append(b"%o %s\x00" % (entry.mode, name.encode("utf-8", "surrogateescape")))
        parts.append(bytes.fromhex(entry.id))
    return b"".join(parts)


def decode_tree(raw: bytes) -> Tree:
    """Parse git tree bytes (dulwich's native parser does the byte work)."""
    try:
        items = _parse_tree_native(raw, 20)
    except Exception as exc:  # the native parser raises ObjectFormatException and friends
        raise CorruptObject(f"malformed tree: {exc}") from exc
    # One comprehension, each entry built as the tuple it is (a NamedTuple's own __new__ costs a
    # call more): a tree of a thousand entries is read on most landings of a busy directory.
    return Tree(
        {
            name.decode("utf-8", "surrogateescape"): _new_entry(Entry, (mode, hexsha.decode("ascii")))
            for name, mode, hexsha in items
        }
    )


_new_entry = tuple.__new__


# ---------------------------------------------------------------------------- commits


@dataclass(frozen=True)
class Signature:
    """Who made a commit and when (seconds since the epoch, offset in minutes east of UTC)."""

    name: str
    email: str
    time: int
    offset_minutes: int = 0

    def encode(self) -> bytes:
        for text in (self.name, self.email):
            if any(c in text for c in "<>\n\x00"):
                raise InvalidInput(f"a name or e-mail may not contain <, >, newline or NUL: {text!r}")
        sign = "-" if self.offset_minutes < 0 else "+"
        hours, minutes = divmod(abs(self.offset_minutes), 60)
        return f"{self.name} <{self.email}> {self.time} {sign}{hours:02d}{minutes:02d}".encode()

    @classmethod
    def decode(cls, raw: bytes) -> Signature:
        try:
            text = raw.decode("utf-8", "surrogateescape")
            person, _, rest = text.rpartition("> ")
            name, _, email = person.partition(" <")
            when, tz = rest.split(" ")
            offset = int(tz[1:3]) * 60 + int(tz[3:5])
            return cls(name, email, int(when), -offset if tz[0] == "-" else offset)
        except (ValueError, IndexError) as exc:
            raise CorruptObject(f"malformed signature {raw!r}") from exc


@dataclass(frozen=True)
class Commit:
    """A parsed commit. ``parents`` is ordered: the first parent is the stream's previous head."""

    tree: ObjectId
    parents: tuple[ObjectId, ...]
    author: Signature
    committer: Signature
    message: str

    def encode(self) -> bytes:
        lines = [b"tree " + self.tree.encode()]
        lines += [b"parent " + p.encode() for p in self.parents]
        lines.append(b"author " + self.author.encode())
        lines.append(b"committer " + self.committer.encode())
        return b"\n".join(lines) + b"\n\n" + self.message.encode("utf-8", "surrogateescape")


def decode_commit(raw: bytes) -> Commit:
    """Parse git commit bytes. Headers we do not model (gpgsig, encoding, …) are skipped."""
    head, sep, message = raw.partition(b"\n\n")
    if not sep:
        raise CorruptObject("commit has no blank line before its message")
    tree = None
    parents: list[str] = []
    author = committer = None
    for line in head.split(b"\n"):
        if line.startswith(b" "):
            continue  # continuation of a multi-line header such as gpgsig
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = value.decode("ascii")
        elif key == b"parent":
            parents.append(value.decode("ascii"))
        elif key == b"author":
            author = Signature.decode(value)
        elif key == b"committer":
            committer = Signature.decode(value)
    if tree is None or author is None or committer is None:
        raise CorruptObject("commit lacks tree, author or committer")
    return Commit(tree, tuple(parents), author, committer, message.decode("utf-8", "surrogateescape"))


class GraphNode(NamedTuple):
    """What the commit graph's walks (engine.graph) need to know about one commit, memoized per
    store (engine.store keeps the memo; both import it from here)."""

    generation: int
    parents: tuple[ObjectId, ...]
    #: Committer time in seconds since the epoch: git's tie-breaker between equal generations.
    time: int


def commit_parents_and_time(raw: bytes) -> tuple[tuple[ObjectId, ...], int] | None:
    """A commit's parents and committer time, sliced from its header; None if unusual.

    Walking a deep history for the first time reads every ancestor, and this is about four
    times faster than :func:`decode_commit`: git fixes the header's layout ("tree", every
    "parent", then author and committer). Anything else returns None, and the caller falls
    back to the full parser, which decides (or raises ``CorruptObject``).
    """
    header_end = raw.find(b"\n\n")
    if not (raw.startswith(b"tree ") and raw[45:46] == b"\n" and header_end > 0):
        return None
    position = 46
    parents = []
    while raw.startswith(b"parent ", position) and raw[position + 47 : position + 48] == b"\n":
        parents.append(raw[position + 7 : position + 47].decode("ascii"))
        position += 48
    start = raw.find(b"\ncommitter ", position - 1, header_end)
    if start < 0 or raw.startswith(b"parent ", position):
        return None
    line = raw[start + 11 : raw.index(b"\n", start + 1)]  # ends by header_end at the latest
    when = line.rpartition(b"> ")[2].partition(b" ")[0]
    if not when.isdigit():
        return None
    return tuple(parents), int(when)


# ---------------------------------------------------------------------------- content


def is_binary(data: bytes) -> bool:
    """git's rule: content with a NUL byte in its first 8000 bytes is binary."""
    return b"\x00" in data[:8000]


def split_lines(data: bytes) -> list[bytes]:
    """Split content into lines that keep their ``\\n`` (git's unit of text diff and merge).

    Only ``\\n`` ends a line, as in git; ``bytes.splitlines`` would also split at ``\\r``.
    """
    if not data:
        return []
    parts = data.split(b"\n")
    last = parts.pop()
    lines = [part + b"\n" for part in parts]
    if last:
        lines.append(last)
    return lines
