"""A diff as the pages show it: files with hunks of lines, unified or side by side, changed words
marked, renames with their similarity, and limits that keep a huge change usable.

The input is the engine's file changes (``repos.services.browse.changes``); lines are matched with
patience diff (as blame is), words inside a changed line with difflib. All text is escaped here;
the only markup added is ``<span class="x">`` around changed words.

Limits (what GitHub does, in spirit): a page compares at most :data:`MAX_FILES` files and
:data:`MAX_PAGE_LINES` diff lines; a file shows at most :data:`MAX_FILE_LINES` (more on the
file's own diff page, up to :data:`MAX_SINGLE_FILE_LINES`); files over 1 MB and binary files are
named with their sizes only. Everything cut says so and links to the full view.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import zip_longest

from patiencediff import PatienceSequenceMatcher

from engine.objects import MODE_GITLINK, Entry, is_binary, split_lines
from engine.trees import Added, Deleted, FileChange, Renamed

from .render import MAX_DISPLAY_BYTES, cut_line

MAX_FILES = 1_000
MAX_PAGE_LINES = 20_000
MAX_FILE_LINES = 3_000
MAX_SINGLE_FILE_LINES = 50_000
#: Lines longer than this are not compared word by word.
MAX_WORD_DIFF_CHARS = 1_000
CONTEXT = 3

_WORDS = re.compile(r"\w+|\s+|[^\w\s]")


@dataclass
class Line:
    """One diff line: ``kind`` is ``context``, ``add`` or ``del``; ``html`` is escaped text."""

    kind: str
    old: int | None
    new: int | None
    html: str


@dataclass
class Hunk:
    header: str
    #: Unified layout: the lines in order.
    lines: list[Line] = field(default_factory=list)
    #: Side-by-side layout: (left, right) pairs, either may be None.
    rows: list[tuple[Line | None, Line | None]] = field(default_factory=list)


@dataclass
class FileDiff:
    """One file of a diff, with what to show of it."""

    status: str
    path: str
    old_path: str | None
    similarity: int | None
    additions: int = 0
    deletions: int = 0
    hunks: list[Hunk] = field(default_factory=list)
    #: Why there is nothing (or not everything) to show, as a sentence; "" when all is shown.
    note: str = ""
    #: The hunks stop early: the file's own page shows more.
    truncated: bool = False
    #: Not compared at all (over the page's limits): counts are unknown.
    skipped: bool = False

    @property
    def anchor(self) -> str:
        return "diff-" + hashlib.sha1(self.path.encode("utf-8", "surrogatepass")).hexdigest()[:12]

    @property
    def display_path(self) -> str:
        return f"{self.old_path} → {self.path}" if self.old_path else self.path


@dataclass
class Diff:
    files: list[FileDiff]
    additions: int
    deletions: int
    #: Some files were not compared (the page's limits): their rows link to their own diff.
    skipped: int


def build(
    changes: list[FileChange],
    read_blob: Callable[[str], bytes],
    *,
    split: bool,
    ignore_whitespace: bool,
    single_file: bool = False,
) -> Diff:
    """The page's model of ``changes``; ``read_blob(id)`` reads a blob of the repository."""
    files: list[FileDiff] = []
    budget = MAX_SINGLE_FILE_LINES if single_file else MAX_PAGE_LINES
    per_file = MAX_SINGLE_FILE_LINES if single_file else MAX_FILE_LINES
    skipped = 0
    for number, change in enumerate(changes):
        item = FileDiff(
            change.status,
            change.path,
            old_path(change),
            change.similarity if isinstance(change, Renamed) else None,
        )
        before, after = old_entry(change), new_entry(change)
        files.append(item)
        if number >= MAX_FILES or budget <= 0:
            item.skipped = True
            item.note = "Not compared on this page (a large change): open the file's own diff."
            skipped += 1
            continue
        old = _content(before, read_blob)
        new = _content(after, read_blob)
        if isinstance(old, str):
            item.note = old
            continue
        if isinstance(new, str):
            item.note = new
            continue
        if old == new:
            if change.status == "renamed":
                item.note = "Renamed without changes."
            elif before is not None and after is not None and before.mode != after.mode:
                item.note = f"Mode changed from {before.mode:o} to {after.mode:o}."
            continue
        shown = _compare(item, old, new, split=split, ignore_whitespace=ignore_whitespace, limit=min(per_file, budget))
        budget -= shown
        if not item.hunks and not item.note:
            item.note = "Only whitespace changed." if ignore_whitespace else "No textual change."
    return Diff(files, sum(f.additions for f in files), sum(f.deletions for f in files), skipped)


def old_entry(change: FileChange) -> Entry | None:
    """The file before the change (None when it was added)."""
    return None if isinstance(change, Added) else change.old


def new_entry(change: FileChange) -> Entry | None:
    """The file after the change (None when it was deleted)."""
    return None if isinstance(change, Deleted) else change.new


def old_path(change: FileChange) -> str | None:
    """Where a renamed file came from (None for any other change)."""
    return change.old_path if isinstance(change, Renamed) else None


def _content(entry: Entry | None, read_blob: Callable[[str], bytes]) -> list[bytes] | str:
    """The file's lines, or the sentence that replaces them (binary, too large, submodule)."""
    if entry is None:
        return []
    if entry.mode == MODE_GITLINK:
        return f"Submodule at {entry.id}."
    data = read_blob(entry.id)
    if is_binary(data):
        return f"Binary file, {len(data):,} bytes."
    if len(data) > MAX_DISPLAY_BYTES:
        return f"File too large to compare here ({len(data):,} bytes): view it raw."
    return split_lines(data)


def _compare(item: FileDiff, old: list[bytes], new: list[bytes], *, split: bool, ignore_whitespace: bool, limit: int):
    """Fill ``item``'s hunks and counts; returns the number of lines shown.

    Lines are matched as bytes and decoded only where shown (a 500-file page shows a tenth of
    the lines it compares).
    """
    if ignore_whitespace:
        old_keys = [b"".join(line.split()) for line in old]
        new_keys = [b"".join(line.split()) for line in new]
    else:
        old_keys, new_keys = old, new
    matcher = PatienceSequenceMatcher(None, old_keys, new_keys)
    shown = 0
    for group in matcher.get_grouped_opcodes(CONTEXT):
        first, last = group[0], group[-1]
        hunk = Hunk(f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for k in range(i2 - i1):
                    line = Line("context", i1 + k + 1, j1 + k + 1, _escape(_text(new[j1 + k])))
                    _add(hunk, split, line, line)
                continue
            item.deletions += i2 - i1
            item.additions += j2 - j1
            old_text = [_text(line) for line in old[i1:i2]]
            new_text = [_text(line) for line in new[j1:j2]]
            paired = min(len(old_text), len(new_text))
            marked = [_word_diff(old_text[k], new_text[k]) for k in range(paired)]
            olds = [
                Line("del", i1 + k + 1, None, marked[k][0] if k < paired else _escape(text))
                for k, text in enumerate(old_text)
            ]
            news = [
                Line("add", None, j1 + k + 1, marked[k][1] if k < paired else _escape(text))
                for k, text in enumerate(new_text)
            ]
            if split:
                hunk.rows.extend(zip_longest(olds, news))
            else:
                hunk.lines.extend(olds + news)
        size = len(hunk.rows) if split else len(hunk.lines)
        if shown >= limit:
            item.truncated = True  # keep counting the changes; show no more lines
            continue
        if shown + size > limit:
            size = limit - shown  # a hunk over the limit: its beginning
            hunk.rows, hunk.lines = hunk.rows[:size], hunk.lines[:size]
            item.truncated = True
        item.hunks.append(hunk)
        shown += size
    if item.truncated:
        item.note = "This diff is long: only its beginning is shown."
    return shown


def _add(hunk: Hunk, split: bool, left: Line, right: Line) -> None:
    if split:
        hunk.rows.append((left, right))
    else:
        hunk.lines.append(left)


def _text(line: bytes) -> str:
    text = line.decode("utf-8", "replace").rstrip("\n")
    return cut_line(text)[0]


def _escape(text: str) -> str:
    return html.escape(text)


def _word_diff(old: str, new: str) -> tuple[str, str]:
    """Both lines as HTML with the words that differ wrapped in ``<span class="x">``.

    The words between the common leading and trailing words are marked (as GitHub does): one
    linear pass per line pair, where a word-level alignment cost a page of 500 files a third of
    its time. A line rewritten as a whole (little in common) is left unmarked.
    """
    if len(old) > MAX_WORD_DIFF_CHARS or len(new) > MAX_WORD_DIFF_CHARS:
        return html.escape(old), html.escape(new)
    a, b = _WORDS.findall(old), _WORDS.findall(new)
    shortest = min(len(a), len(b))
    head = 0
    while head < shortest and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    if 2 * (head + tail) < 0.3 * (len(a) + len(b)):
        return html.escape(old), html.escape(new)  # a rewritten line: marking every word says nothing
    return _mark(a, head, len(a) - tail), _mark(b, head, len(b) - tail)


def _mark(words: list[str], start: int, stop: int) -> str:
    before, changed, after = "".join(words[:start]), "".join(words[start:stop]), "".join(words[stop:])
    middle = f'<span class="x">{html.escape(changed)}</span>' if changed else ""
    return html.escape(before) + middle + html.escape(after)


@dataclass
class TreeRow:
    """One row of the changed-files tree: a directory or a file, indented by ``depth``."""

    depth: int
    name: str
    file: FileDiff | None


def file_tree(files: list[FileDiff]) -> list[TreeRow]:
    """The changed files as a directory tree (directories once, before their files), in path order."""
    rows: list[TreeRow] = []
    opened: list[str] = []
    for item in sorted(files, key=lambda f: f.path.split("/")):
        *directories, name = item.path.split("/")
        common = 0
        while common < len(opened) and common < len(directories) and opened[common] == directories[common]:
            common += 1
        opened = opened[:common]
        for depth in range(common, len(directories)):
            rows.append(TreeRow(depth, directories[depth] + "/", None))
            opened.append(directories[depth])
        rows.append(TreeRow(len(directories), name, item))
    return rows
