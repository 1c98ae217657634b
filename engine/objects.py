"""Git objects in SHA-1 format: ids, blobs, trees and commits, byte-for-byte as git writes them.

A changeset *is* a git commit, so everything here must hash exactly as git does:
``git fsck --strict`` accepts what we write and our ids equal git's for the same content
(both checked by the oracle tests). Object ids are 40-character lowercase hex strings.
Tree entry names and paths are ``str`` in the *escaped form* (:func:`path_from_bytes`): UTF-8 as
it is, a byte that is not valid UTF-8 as ``\\xNN`` and a backslash as ``\\\\``, so any name git
allows has exactly one text name, one that SQL and JSON accept, and the bytes written back are
the bytes read. Commit messages and signatures are shown as git shows them: decoded with the
commit's ``encoding`` header (UTF-8 without one), invalid bytes as U+FFFD; the commit's own
bytes, and so its id, are never touched.
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

#: What the escaped form escapes: a backslash, and (after ``surrogateescape``) a byte that is
#: not part of valid UTF-8.
_TO_ESCAPE = re.compile("[\\\\\udc80-\udcff]")
#: The escapes of the escaped form, as :func:`path_to_bytes` splits a name by them.
_ESCAPES = re.compile(r"(\\\\|\\x[0-9a-f]{2})")


def path_from_bytes(raw: bytes) -> str:
    """The escaped form of a name or path as git stores it: UTF-8 text as it is, each byte
    that is not part of valid UTF-8 as ``\\xNN`` (two lowercase hex digits), and a backslash as
    ``\\\\``. Every byte string has exactly one escaped form (:func:`path_to_bytes` inverts it)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "surrogateescape")
    else:
        if "\\" not in text:
            return text
    return _TO_ESCAPE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return "\\\\" if char == "\\" else f"\\x{ord(char) - 0xDC00:02x}"


def path_to_bytes(name: str) -> bytes:
    """The bytes git stores for a name or path in the escaped form; ``UnsafePath`` if ``name``
    is not one (a lone backslash, an escape that is not canonical, a lone surrogate)."""
    try:
        if "\\" not in name:
            return name.encode("utf-8")
        parts = _ESCAPES.split(name)
        out = bytearray()
        for index, part in enumerate(parts):
            if index % 2:
                out += b"\\" if part == "\\\\" else bytes((int(part[2:], 16),))
            elif "\\" in part:
                raise UnsafePath(f"a backslash must be escaped as \\\\ in a path: {name!r}")
            else:
                out += part.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafePath(f"a path must be valid text (no lone surrogates): {name!r}") from None
    raw = bytes(out)
    if path_from_bytes(raw) != name:  # e.g. "\\x41" for "A": one name per byte string
        raise UnsafePath(f"not the escaped form of a path: {name!r} (write {path_from_bytes(raw)!r})")
    return raw


def split_path(path: str) -> list[str]:
    """Validate a repository path and return its segments.

    Refused (``UnsafePath``): empty, absolute, trailing slash, empty segment, ``.`` or ``..``,
    a ``.git`` segment in any letter case (git itself refuses those on checkout), a NUL byte,
    and text that is not a path's escaped form (:func:`path_to_bytes`). A backslash is only
    ever an escape here: a path that *creates* a name with one (a literal backslash, a path
    separator on some clients, or bytes that are not UTF-8) is refused by the changeset
    (engine.changeset), while an existing one can be read, deleted and renamed away.
    """
    if not isinstance(path, str) or not path:
        raise UnsafePath(f"empty or non-text path: {path!r}")
    if "\x00" in path:
        raise UnsafePath(f"path contains NUL: {path!r}")
    path_to_bytes(path)  # the escaped form, valid text
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


def _name_bytes(name: str) -> bytes:
    return name.encode() if "\\" not in name else path_to_bytes(name)


def _sort_key(item: tuple[str, Entry]) -> bytes:
    # git orders entries by name bytes, with directories compared as if they ended in '/'.
    name, entry = item
    key = _name_bytes(name)
    return key + b"/" if entry.mode == MODE_TREE else key


def encode_tree(tree: Mapping[str, Entry]) -> bytes:
    """The canonical git serialization of ``tree``."""
    parts = []
    for name, entry in sorted(tree.items(), key=_sort_key):
        parts.append(b"%o %s\x00" % (entry.mode, _name_bytes(name)))
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
    try:
        tree = Tree({name.decode(): _new_entry(Entry, (mode, hexsha.decode("ascii"))) for name, mode, hexsha in items})
    except UnicodeDecodeError:
        tree = None
    # A name that is not UTF-8, or has a backslash (one join of the names, in C), is escaped.
    if tree is None or "\\" in "".join(tree):
        tree = Tree(
            {path_from_bytes(name): _new_entry(Entry, (mode, hexsha.decode("ascii"))) for name, mode, hexsha in items}
        )
    return tree


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
        return _utf8(f"{self.name} <{self.email}> {self.time} {sign}{hours:02d}{minutes:02d}", "a name or e-mail")

    @classmethod
    def decode(cls, raw: bytes, encoding: str | None = None) -> Signature:
        """Parse ``Name <email> seconds +hhmm`` as git shows it: text decoded as
        :func:`decode_text` does, and an ident git itself tolerates (a missing or malformed date
        or zone, no e-mail brackets) read as git reads it, with time 0 or zone +0000."""
        text = decode_text(raw, encoding)
        person, bracket, rest = text.rpartition(">")
        if not bracket:
            return cls(text.strip(), "", 0, 0)
        name, _, email = person.partition("<")
        fields = rest.split()
        when = int(fields[0]) if fields and fields[0].isascii() and fields[0].isdigit() else 0
        zone = _ZONE.fullmatch(fields[1]) if len(fields) > 1 else None
        offset = int(zone[2]) * 60 + int(zone[3]) if zone else 0
        return cls(name.strip(), email, when, -offset if zone and zone[1] == "-" else offset)


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: JSON can carry one ("\\udcff"), UTF-8 cannot
        raise InvalidInput(f"{what} must be valid text (no lone surrogates): {text[:80]!r}") from None


_ZONE = re.compile(r"([+-])(\d\d)(\d\d)")


def decode_text(raw: bytes, encoding: str | None = None) -> str:
    """A commit's message or ident as git shows it: decoded from its ``encoding`` header (UTF-8
    when there is none, or git would not know the name either), each invalid byte as U+FFFD,
    and NUL (which no database column takes) as U+FFFD too."""
    try:
        # A name Python does not know, or one of its non-text codecs ("rot13"): UTF-8, as git
        # falls back to the bytes as they are.
        text = raw.decode(encoding or "utf-8", "replace")
    except LookupError:
        text = raw.decode("utf-8", "replace")
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


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
        return b"\n".join(lines) + b"\n\n" + _utf8(self.message, "a message")


def decode_commit(raw: bytes) -> Commit:
    """Parse git commit bytes for showing: the message and idents decoded as git shows them
    (:func:`decode_text`, by the ``encoding`` header). Other headers (gpgsig, mergetag, …) are
    skipped. The result is for reading: a commit with an ``encoding`` header or invalid text
    does not :meth:`Commit.encode` back to its bytes (its id is the stored bytes' anyway)."""
    head, sep, message = raw.partition(b"\n\n")
    if not sep:  # git writes the blank line always, but reads a commit without one as message-less
        head, message = raw.rstrip(b"\n"), b""
    tree = None
    parents: list[str] = []
    author = committer = encoding = None
    for line in head.split(b"\n"):
        if line.startswith(b" "):
            continue  # continuation of a multi-line header such as gpgsig
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = value.decode("ascii", "replace")
        elif key == b"parent":
            parents.append(value.decode("ascii", "replace"))
        elif key == b"author":
            author = value
        elif key == b"committer":
            committer = value
        elif key == b"encoding":
            encoding = value.decode("ascii", "replace")
    if tree is None or author is None or committer is None or not is_object_id(tree):
        raise CorruptObject("commit lacks tree, author or committer")
    if not all(map(is_object_id, parents)):
        raise CorruptObject(f"malformed parent in commit: {parents!r}")
    return Commit(
        tree,
        tuple(parents),
        Signature.decode(author, encoding),
        Signature.decode(committer, encoding),
        decode_text(message, encoding),
    )


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
