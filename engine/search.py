"""Code search at a revision: ``git grep -E`` semantics with RE2, over the files a revision lists.

The pieces, each usable alone:

* :class:`Matcher` — a pattern (RE2 syntax; ``fixed``, ``ignore_case`` and ``word`` as git grep's
  ``-F``, ``-i`` and ``-w``) compiled once, checked against a blob's bytes line by line: only
  ``\\n`` ends a line, a ``\\r`` stays in it, bytes that are not UTF-8 are matched as bytes, and
  ``column`` is the byte offset of the match plus 1. A blob with a NUL in its first 8000 bytes is
  binary: it matches as git says "Binary file … matches", without lines. Its trigram
  :attr:`Matcher.query` (engine.trigrams) selects the candidates.
* :class:`FileList` — a revision's regular files (symbolic links and submodules are not searched,
  as in git grep), in git's path order, each with its blob id.
* :func:`search` — asks a :class:`CandidateSource` which files of a list can match (the trigram
  index's answer, plus every file whose blob it does not cover), checks those in order from a
  :class:`Position` with the matcher (a doubling chunk at a time, on threads once a chunk is
  large), and stops at a limit or a deadline. It answers a :class:`Result` whose ``resume``
  position is where the next page starts.

RE2 runs in time linear in the text, so no pattern can hang a search; a deadline bounds the
number of files a search reads.
"""

from __future__ import annotations

import bisect
import fnmatch
import itertools
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import re2  # type: ignore[import-untyped]

from .errors import InvalidInput
from .objects import MODE_TREE, ObjectId, is_binary
from .trigrams import Query, plan

#: Modes git grep reads at a tree: regular files (symbolic links and gitlinks are skipped).
SEARCHED_MODES = frozenset({0o100644, 0o100755})
#: RE2's memory budget for one pattern's automata (its default is 8 MiB).
RE2_MAX_MEM = 64 << 20
_FLAG_GROUP_TURNING_OFF = re.compile(r"\(\?[a-zA-Z]*-")


def path_sort_key(path: str) -> bytes:
    """The bytes git orders a revision's paths by."""
    from . import objects

    to_bytes = getattr(objects, "path_to_bytes", None)
    if to_bytes is not None:
        return bytes(to_bytes(path))
    return path.encode("utf-8", "surrogateescape")


_UNANCHORED = re2._re2.RE2.Anchor.UNANCHORED


def _find(compiled: Any, text: bytes, pos: int = 0) -> tuple[int, int] | None:
    """The span of the leftmost match at or after ``pos`` (the text around it is context: ``^``
    does not match at ``pos`` unless a newline or the start is before it). RE2's own ``Match``,
    without the Python wrapper's generator and match object: a search calls it once per
    matching line, and the wrapper cost more than the match."""
    span = compiled._regexp.Match(_UNANCHORED, text, pos, len(text))[0]
    return None if span[0] < 0 else span


def _word_byte(byte: int) -> bool:
    # git's word characters (sane_ctype): ASCII letters, digits and '_'; every other byte is not.
    return byte < 0x80 and (chr(byte).isalnum() or byte == 0x5F)


@dataclass(frozen=True)
class LineMatch:
    """One matching line: its number and the column (byte offset + 1) of its first match."""

    line: int
    column: int
    text: bytes
    before: tuple[bytes, ...] = ()
    after: tuple[bytes, ...] = ()


class Matcher:
    """A compiled pattern with git grep's flags (InvalidInput if RE2 refuses it)."""

    def __init__(self, pattern: str, *, fixed: bool = False, ignore_case: bool = False, word: bool = False) -> None:
        if "\n" in pattern:
            raise InvalidInput("a pattern is one line: it holds a newline")
        self.pattern, self.fixed, self.ignore_case, self.word = pattern, fixed, ignore_case, word
        options = re2.Options()
        options.case_sensitive = not ignore_case
        options.literal = fixed
        options.log_errors = False
        options.never_capture = True
        options.max_mem = RE2_MAX_MEM
        try:
            self._line = re2.compile(pattern.encode("utf-8", "surrogatepass"), options)
            # The whole blob is searched with ^ and $ at line ends, and only the lines holding a
            # match are checked alone. Sound as long as the pattern cannot turn multi-line mode
            # off or anchor at the text's ends (\A, \z): then every line is checked alone.
            self._buffer = self._line
            if not fixed:
                if "\\A" in pattern or "\\z" in pattern or _FLAG_GROUP_TURNING_OFF.search(pattern):
                    self._buffer = None
                else:
                    self._buffer = re2.compile(b"(?m)" + pattern.encode("utf-8", "surrogatepass"), options)
        except re2.error as error:
            raise InvalidInput(f"invalid pattern: {error}") from None
        except UnicodeEncodeError:
            raise InvalidInput("invalid pattern: not text") from None
        #: The trigram query every matching blob satisfies.
        self.query: Query = plan(pattern, ignore_case=ignore_case, fixed=fixed)

    def match_line(self, line: bytes) -> int | None:
        """The byte offset of the line's first (word) match, or None."""
        found = _find(self._line, line)
        if found is None:
            return None
        if not self.word:
            return found[0]
        # git grep -w: a match counts when no word character touches it and it is not empty;
        # otherwise try again from the next position after a non-word character.
        pos = 0
        while found is not None:
            start, end = found
            if (
                start != end
                and (start == 0 or not _word_byte(line[start - 1]))
                and (end == len(line) or not _word_byte(line[end]))
            ):
                return start
            pos = start + 1
            while pos < len(line) and _word_byte(line[pos - 1]):
                pos += 1
            if pos >= len(line):
                return None
            found = _find(self._line, line, pos)
        return None

    def spans(self, line: bytes) -> Iterator[tuple[int, int]]:
        """Each non-empty match in a line, left to right (what a page highlights)."""
        pos = 0
        while pos <= len(line):
            found = _find(self._line, line, pos)
            if found is None:
                return
            start, end = found
            if end > start:
                yield start, end
            pos = end if end > start else start + 1

    def matching_lines(self, data: bytes, after_line: int = 0) -> Iterator[tuple[int, int, int, int]]:
        """``(line number, column, line start, line end)`` of each matching line after line
        ``after_line``, in order."""
        pos = 0
        for _ in range(after_line):
            newline = data.find(b"\n", pos)
            if newline < 0:
                return
            pos = newline + 1
        size = len(data)
        # The line that starts at known_start is number known_number.
        known_start, known_number = pos, after_line + 1
        while pos < size:
            inside = None
            if self._buffer is not None:
                found = _find(self._buffer, data, pos)
                # An empty match at the very end is the last line's, unless a newline ends it.
                if found is None or found[0] > size or (found[0] == size and data.endswith(b"\n")):
                    return
                hit, hit_end = found
                start = data.rfind(b"\n", 0, hit) + 1
                # A match within one line is that line's first (the leftmost at or after its
                # start, with ^, $ and \b seeing what they see in the line alone).
                if not self.word and data.find(b"\n", hit, hit_end) < 0:
                    inside = hit - start
            else:
                start = pos
            end = data.find(b"\n", start)
            if end < 0:
                end = size
            known_number += data.count(b"\n", known_start, start)
            known_start = start
            column = inside if inside is not None else self.match_line(data[start:end])
            if column is not None:
                yield known_number, column + 1, start, end
            pos = end + 1

    def grep(self, data: bytes, *, context: int = 0, after_line: int = 0, limit: int | None = None) -> list[LineMatch]:
        """The matching lines of ``data`` after line ``after_line`` (at most ``limit``), each
        with up to ``context`` lines around it."""
        out: list[LineMatch] = []
        lines: list[bytes] | None = None
        for number, column, start, end in self.matching_lines(data, after_line):
            if limit is not None and len(out) >= limit:
                break
            if context:
                if lines is None:
                    lines = data.split(b"\n")
                    if data.endswith(b"\n"):
                        lines.pop()
                index = number - 1
                out.append(
                    LineMatch(
                        number,
                        column,
                        data[start:end],
                        tuple(lines[max(0, index - context) : index]),
                        tuple(lines[index + 1 : index + 1 + context]),
                    )
                )
            else:
                out.append(LineMatch(number, column, data[start:end]))
        return out

    def count(self, data: bytes) -> int:
        """How many lines of ``data`` match."""
        return sum(1 for _ in self.matching_lines(data))

    def matches_text(self, text: str) -> bool:
        """Whether a one-line text (a path) matches."""
        return self.match_line(text.encode("utf-8", "surrogateescape")) is not None


# ---------------------------------------------------------------------------- path filters


def _pathspec_matches(spec: str, path: str) -> bool:
    """git's pathspec without magic: the path itself, a directory above it, or a glob in which
    ``*`` crosses ``/``."""
    spec = spec.rstrip("/") if spec not in ("", "/") else spec
    if spec in ("", ".", "/"):
        return True
    if path == spec or path.startswith(spec + "/"):
        return True
    if any(char in spec for char in "*?["):
        if fnmatch.fnmatchcase(path, spec):
            return True
        # A glob matches a directory too: everything under it.
        parts = path.split("/")
        return any(fnmatch.fnmatchcase("/".join(parts[:i]), spec) for i in range(1, len(parts)))
    return False


@dataclass(frozen=True)
class PathFilter:
    """``path`` globs keep (any of them), ``exclude`` globs drop, as git's pathspecs do."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def __call__(self, path: str) -> bool:
        if self.include and not any(_pathspec_matches(spec, path) for spec in self.include):
            return False
        return not any(_pathspec_matches(spec, path) for spec in self.exclude)

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)


# ---------------------------------------------------------------------------- file lists


class TreeReader(Protocol):
    def read_tree(self, oid: ObjectId) -> Any: ...


class FileList:
    """A revision's searched files in git's path order: ``paths[i]`` holds blob ``blobs[i]``
    (20 raw bytes)."""

    __slots__ = ("tree", "paths", "blobs", "_keys", "_where", "unindexed")

    def __init__(self, tree: str, paths: list[str], blobs: list[bytes]) -> None:
        self.tree, self.paths, self.blobs = tree, paths, blobs
        self._keys: list[bytes] | None = None
        self._where: dict[bytes, list[int]] | None = None
        #: A candidate source's note of the files it does not cover: (its version, their indexes).
        self.unindexed: tuple[object, list[int]] | None = None

    def positions(self, blobs: Iterable[bytes]) -> list[int]:
        """The indexes of the files holding any of ``blobs``, in order."""
        if self._where is None:
            where: dict[bytes, list[int]] = {}
            for index, blob in enumerate(self.blobs):
                where.setdefault(blob, []).append(index)
            self._where = where
        found = self._where
        return sorted(index for blob in blobs for index in found.get(blob, ()))

    def __len__(self) -> int:
        return len(self.paths)

    @classmethod
    def of_tree(cls, store: TreeReader, tree: ObjectId) -> FileList:
        """Walk the whole tree."""
        paths: list[str] = []
        blobs: list[bytes] = []

        def walk(oid: ObjectId, prefix: str) -> None:
            entries = store.read_tree(oid)
            for name in sorted(entries, key=lambda n: _tree_order(n, entries)):
                mode, child = entries[name]
                if mode == MODE_TREE:
                    walk(child, f"{prefix}{name}/")
                elif mode in SEARCHED_MODES:
                    paths.append(prefix + name)
                    blobs.append(bytes.fromhex(child))

        walk(tree, "")
        return cls(tree, paths, blobs)

    def changed(self, tree: str, changes: Iterable[tuple[str, bytes | None]]) -> FileList:
        """The list of another tree that differs from this one by ``changes``: ``(path, blob)``
        written, or ``(path, None)`` gone."""
        paths, blobs = list(self.paths), list(self.blobs)
        for path, blob in changes:
            key = path_sort_key(path)
            at = bisect.bisect_left(paths, key, key=path_sort_key)
            present = at < len(paths) and paths[at] == path
            if blob is None:
                if present:
                    del paths[at], blobs[at]
            elif present:
                blobs[at] = blob
            else:
                paths.insert(at, path)
                blobs.insert(at, blob)
        return FileList(tree, paths, blobs)

    def start_after(self, path: str | None) -> int:
        """The index of the first file after ``path`` (0 for None)."""
        if path is None:
            return 0
        if self._keys is None:
            self._keys = [path_sort_key(p) for p in self.paths]
        return bisect.bisect_right(self._keys, path_sort_key(path))


def _tree_order(name: str, entries: Any) -> bytes:
    key = path_sort_key(name)
    return key + b"/" if entries[name][0] == MODE_TREE else key


def file_changes(store: TreeReader, old: ObjectId, new: ObjectId) -> list[tuple[str, bytes | None]]:
    """The searched files that differ between two trees: ``(path, blob)`` or ``(path, None)``,
    walking only the subtrees that differ."""
    out: list[tuple[str, bytes | None]] = []

    def files(oid: ObjectId, prefix: str) -> None:
        for name, (mode, child) in store.read_tree(oid).items():
            if mode == MODE_TREE:
                files(child, f"{prefix}{name}/")
            elif mode in SEARCHED_MODES:
                out.append((prefix + name, bytes.fromhex(child)))

    def gone(oid: ObjectId, prefix: str) -> None:
        for name, (mode, child) in store.read_tree(oid).items():
            if mode == MODE_TREE:
                gone(child, f"{prefix}{name}/")
            elif mode in SEARCHED_MODES:
                out.append((prefix + name, None))

    def walk(a: ObjectId, b: ObjectId, prefix: str) -> None:
        left, right = store.read_tree(a), store.read_tree(b)
        for name in left.keys() | right.keys():
            was, now = left.get(name), right.get(name)
            if was == now:
                continue
            path = prefix + name
            if was is not None and was[0] == MODE_TREE and now is not None and now[0] == MODE_TREE:
                walk(was[1], now[1], path + "/")
                continue
            if was is not None:
                if was[0] == MODE_TREE:
                    gone(was[1], path + "/")
                elif was[0] in SEARCHED_MODES:
                    out.append((path, None))
            if now is not None:
                if now[0] == MODE_TREE:
                    files(now[1], path + "/")
                elif now[0] in SEARCHED_MODES:
                    out.append((path, bytes.fromhex(now[1])))

    if old != new:
        walk(old, new, "")
    # A path gone and written again (a file that became a directory's file) ends written.
    out.sort(key=lambda change: change[1] is not None)
    return out


# ---------------------------------------------------------------------------- the search


class CandidateSource(Protocol):
    """Which files can match: the index's answer, plus every file it does not cover."""

    def candidates(self, query: Query, files: FileList) -> Iterable[int] | None:
        """The indexes of the files of ``files`` that may match ``query``, in increasing order
        (a list, or an iterator consumed as the search goes); None for every file."""
        ...


@dataclass(frozen=True)
class Position:
    """Where a page starts: after ``path``'s line ``line`` (0: the whole file), or at the start."""

    path: str | None = None
    line: int = 0


@dataclass
class FileResult:
    path: str
    binary: bool = False
    lines: list[LineMatch] = field(default_factory=list)
    #: Matching lines (mode files and count; the lines themselves in content mode).
    count: int = 0


@dataclass
class Result:
    files: list[FileResult]
    #: More exist after this page (or the deadline came first).
    truncated: bool
    #: Where the next page starts, when ``truncated``.
    resume: Position | None
    #: Lines that match (mode count).
    count: int = 0
    #: The deadline stopped the search.
    timed_out: bool = False


CONTENT, FILES, COUNT = "content", "files", "count"


def search(
    files: FileList,
    matcher: Matcher,
    read_blob: Callable[[bytes], bytes],
    source: CandidateSource,
    *,
    mode: str = CONTENT,
    limit: int = 100,
    context: int = 0,
    paths: PathFilter | None = None,
    start: Position = Position(),
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Result:
    """Search ``files`` (see the module's docstring). ``limit`` counts lines in content mode,
    files in files mode, and is ignored in count mode (every file is counted)."""
    first, after_first = files.start_after(start.path), 0
    if start.line and start.path is not None and first and files.paths[first - 1] == start.path:
        first, after_first = first - 1, start.line
    positions = source.candidates(matcher.query, files)
    order: Iterable[int]
    if positions is None:
        order = range(first, len(files))
    elif isinstance(positions, list):
        order = positions[bisect.bisect_left(positions, first) :]
    else:
        order = itertools.dropwhile(lambda index: index < first, positions)
    todo = (index for index in order if not paths or paths(files.paths[index]))

    def check(index: int) -> tuple[bool, int, list[LineMatch]]:
        """(binary, matching lines, the lines in content mode) of file ``index``."""
        data = read_blob(files.blobs[index])
        after_line = after_first if index == first else 0
        if mode == COUNT:
            return False, matcher.count(data), []
        binary = is_binary(data)
        if mode == FILES or binary:
            return binary, 0 if after_line else matcher.count(data), []
        found = matcher.grep(data, context=context, after_line=after_line, limit=limit + 1)
        return False, len(found), found

    out: list[FileResult] = []
    taken = total = 0
    for chunk in _chunks(todo):
        if deadline is not None and clock() > deadline:
            return Result(
                out, True, _resume_at(files, chunk[0], after_first if chunk[0] == first else 0), total, timed_out=True
            )
        checked = _pool().map(check, chunk) if len(chunk) >= PARALLEL_FROM else map(check, chunk)
        for index, (binary, count, found) in zip(chunk, checked):
            path = files.paths[index]
            after_line = after_first if index == first else 0
            if mode == COUNT:
                total += count
                continue
            if mode == FILES or binary:
                # One entry per file: a page never ends inside one.
                if not count:
                    continue
                if taken >= limit:
                    return Result(out, True, _resume_at(files, index), total)
                out.append(FileResult(path, binary, count=count))
                taken += 1
                continue
            if not found:
                continue
            room = limit - taken
            if room <= 0:
                return Result(out, True, _resume_at(files, index, after_line), total)
            if len(found) > room:
                kept = found[:room]
                out.append(FileResult(path, lines=kept, count=len(kept)))
                return Result(out, True, Position(path, kept[-1].line), total)
            out.append(FileResult(path, lines=found, count=len(found)))
            taken += len(found)
    return Result(out, False, None, total)


#: Candidate files are checked a chunk at a time, the chunks doubling from one file to
#: MAX_CHUNK: a selective search checks its few files at once, a scan of many on several threads
#: (RE2 and the inflating of blobs release the GIL), and a page that fills early reads little more.
MAX_CHUNK = 64
PARALLEL_FROM = 8
SEARCH_THREADS = max(1, min(4, os.cpu_count() or 1))
_threads: ThreadPoolExecutor | None = None
_threads_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _threads
    with _threads_lock:
        if _threads is None:
            _threads = ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="search")
        return _threads


def _chunks(indexes: Iterator[int]) -> Iterator[list[int]]:
    size = 1
    while chunk := list(itertools.islice(indexes, size)):
        yield chunk
        size = min(size * 2, MAX_CHUNK)


def _resume_at(files: FileList, index: int, after_line: int = 0) -> Position:
    """The position from which file ``index`` is searched again (after line ``after_line``)."""
    if after_line:
        return Position(files.paths[index], after_line)
    return Position(files.paths[index - 1]) if index else Position()


def search_paths(
    files: FileList, matcher: Matcher, *, limit: int = 100, paths: PathFilter | None = None, after: str | None = None
) -> Result:
    """``target=paths``: the files whose path matches, in order, a page at a time."""
    out: list[FileResult] = []
    for index in range(files.start_after(after), len(files)):
        path = files.paths[index]
        if (paths and not paths(path)) or not matcher.matches_text(path):
            continue
        if len(out) >= limit:
            return Result(out, True, Position(out[-1].path))
        out.append(FileResult(path))
    return Result(out, False, None)
