"""A diff as the pages show it: files with hunks of lines, unified or side by side, changed words
marked, renames with their similarity, and limits that keep a huge change usable.

The input is the engine's file changes (``repos.services.browse.changes``); lines are matched with
patience diff (as blame is). All text is escaped here; the only markup added is Pygments' token
classes (``<span class="k">``: each side's hunk lines are lexed together with the file's lexer,
within a page budget of :data:`HIGHLIGHT_CHARS`) and ``<span class="x">`` around changed words.

Limits (what GitHub does, in spirit): a page compares at most :data:`MAX_FILES` files and
:data:`MAX_PAGE_LINES` diff lines; a file shows at most :data:`MAX_FILE_LINES` (more on the
file's own diff page, up to :data:`MAX_SINGLE_FILE_LINES`); files over 1 MB and binary files are
named with their sizes only; a page lists at most :data:`MAX_LISTED` files. Everything cut says
so and links to the full view.
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

from .render import (
    MAX_DISPLAY_BYTES,
    MAX_HIGHLIGHT_BYTES,
    Lexer,
    SizedCache,
    cut_line,
    display_text,
    lexer_for,
    line_html,
    tokens_by_line,
)

MAX_FILES = 1_000
#: Files a page lists at all (a merge may change a hundred thousand): the rest are counted.
MAX_LISTED = 2_000
MAX_PAGE_LINES = 20_000
MAX_FILE_LINES = 3_000
MAX_SINGLE_FILE_LINES = 50_000
#: Lines longer than this are not compared word by word.
MAX_WORD_DIFF_CHARS = 1_000
CONTEXT = 3
#: Characters of diff lines a page lexes (Pygments: 2-5 µs a character, ~20 ms for all of it);
#: files past it are shown plain. A changeset of a few files is highlighted whole (a hundred
#: lines of code); a 500-file one, its first files. A file's own diff page lexes up to
#: MAX_HIGHLIGHT_BYTES.
HIGHLIGHT_CHARS = 6_000

_WORDS = re.compile(r"\w+|\s+|[^\w\s]")


@dataclass
class Line:
    """One diff line: ``kind`` is ``context``, ``add`` or ``del``; ``html`` is its escaped text
    (highlighted or not, its changed words marked), written once the hunks are known."""

    kind: str
    old: int | None
    new: int | None
    text: str
    #: The changed words, as (start, stop) characters of ``text``.
    mark: tuple[int, int] | None = None
    html: str = ""


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
    #: Its lines carry Pygments' token classes.
    highlighted: bool = False

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
    #: Files changed but not listed at all (past :data:`MAX_LISTED`).
    unlisted: int = 0

    @property
    def changed(self) -> int:
        return len(self.files) + self.unlisted


@dataclass
class _Budget:
    """What is left of the page's :data:`HIGHLIGHT_CHARS`."""

    chars: int


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
    colours = _Budget(MAX_HIGHLIGHT_BYTES if single_file else HIGHLIGHT_CHARS)
    skipped = 0
    for number, change in enumerate(changes[:MAX_LISTED]):
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
        limit = min(per_file, budget)
        key = (change.status, before, after, item.path, split, ignore_whitespace, limit)
        found = _compared_before(key, colours)
        if found is None:
            found = _fill(item, change.status, before, after, read_blob, split, ignore_whitespace, limit, colours)
            _remember(key, found)
        else:
            found.apply(item)
        colours.chars -= found.lexed
        budget -= found.shown
    unlisted = max(0, len(changes) - MAX_LISTED)
    return Diff(files, sum(f.additions for f in files), sum(f.deletions for f in files), skipped, unlisted)


@dataclass
class _Compared:
    """What comparing one file gave (its hunks' lines written): kept per process, since a pair
    of blobs compares the same way every time."""

    hunks: list[Hunk]
    additions: int
    deletions: int
    note: str
    truncated: bool
    highlighted: bool
    #: Lines shown (the page's line budget) and characters lexed (its highlighting budget).
    shown: int
    lexed: int
    #: Shown plain only because the page's highlighting budget was spent before it: then
    #: ``cost`` is what lexing it would have taken.
    waiting: bool
    cost: int

    def apply(self, item: FileDiff) -> None:
        item.hunks, item.additions, item.deletions = self.hunks, self.additions, self.deletions
        item.note, item.truncated, item.highlighted = self.note, self.truncated, self.highlighted

    @property
    def size(self) -> int:
        return sum(len(line.html) + 40 for hunk in self.hunks for line in hunk.lines) + sum(
            2 * len(line.html if line else "") + 40 for hunk in self.hunks for pair in hunk.rows for line in pair
        )


#: Compared files kept per process, up to 16 M characters of their lines' HTML.
_compared: SizedCache[tuple, _Compared] = SizedCache(16_000_000)


def _compared_before(key: tuple, colours: _Budget) -> _Compared | None:
    """The file as compared before with these options and what is left of the page's
    highlighting budget: the page looks the same whether it was remembered or not.

    Kept twice at most: highlighted (or never: no lexer, too large), and plain for want of budget.
    """
    for waiting in (False, True):
        found = _compared.get((*key, waiting))
        if found is not None and (found.cost > colours.chars if waiting else found.lexed <= colours.chars):
            return found
    return None


def _remember(key: tuple, compared: _Compared) -> None:
    _compared.put((*key, compared.waiting), compared, compared.size)


def _fill(
    item: FileDiff,
    status: str,
    before: Entry | None,
    after: Entry | None,
    read_blob: Callable[[str], bytes],
    split: bool,
    ignore_whitespace: bool,
    limit: int,
    colours: _Budget,
) -> _Compared:
    """Compare one file: its note, counts and hunks with their lines' HTML, written on ``item``."""
    shown, cost, waiting = 0, 0, False
    if MODE_GITLINK in (before.mode if before else 0, after.mode if after else 0):
        item.note = _submodule_note(before, after)
    else:
        old = _content(before, read_blob)
        new = _content(after, read_blob)
        if isinstance(old, str) or isinstance(new, str):
            item.note = old if isinstance(old, str) else str(new)
        elif old == new:
            if status == "renamed":
                item.note = "Renamed without changes."
            elif before is not None and after is not None and before.mode != after.mode:
                item.note = f"Mode changed from {before.mode:o} to {after.mode:o}."
        elif _same_but_line_endings(old, new):
            item.additions = item.deletions = sum(1 for a, b in zip(old, new, strict=True) if a != b)
            item.note = "Only line endings changed (LF and CRLF)."
        else:
            shown = _compare(item, old, new, split=split, ignore_whitespace=ignore_whitespace, limit=limit)
            cost, waiting = _paint(item, split, colours.chars)
            if not item.hunks and not item.note:
                item.note = "Only whitespace changed." if ignore_whitespace else "No textual change."
    fields = (item.hunks, item.additions, item.deletions, item.note, item.truncated, item.highlighted)
    lexed = cost if item.highlighted else 0
    return _Compared(*fields, shown=shown, lexed=lexed, waiting=waiting, cost=cost)


def _submodule_note(before: Entry | None, after: Entry | None) -> str:
    """What happened to a submodule (its commits are in another repository: named, never read)."""
    if before is None and after is not None:
        return f"Submodule at commit {after.id}."
    if after is None and before is not None:
        return f"Submodule at commit {before.id} removed."
    if before is not None and after is not None and before.mode == after.mode:
        return f"Submodule moved from commit {before.id} to {after.id}."
    return "Changed between a file and a submodule."


def _same_but_line_endings(old: list[bytes], new: list[bytes]) -> bool:
    return len(old) == len(new) and all(a.rstrip(b"\r\n") == b.rstrip(b"\r\n") for a, b in zip(old, new, strict=True))


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
    """The file's lines, or the sentence that replaces them (binary, too large)."""
    if entry is None:
        return []
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
                    line = Line("context", i1 + k + 1, j1 + k + 1, _text(new[j1 + k]))
                    _add(hunk, split, line, line)
                continue
            item.deletions += i2 - i1
            item.additions += j2 - j1
            olds = [Line("del", i1 + k + 1, None, _text(line)) for k, line in enumerate(old[i1:i2])]
            news = [Line("add", None, j1 + k + 1, _text(line)) for k, line in enumerate(new[j1:j2])]
            for left, right in zip(olds, news, strict=False):
                left.mark, right.mark = _word_diff(left.text, right.text)
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
    return cut_line(display_text(line))[0]


Mark = tuple[int, int] | None


def _word_diff(old: str, new: str) -> tuple[Mark, Mark]:
    """The characters of each line that differ from the other: the words between the common
    leading and trailing words (as GitHub marks them).

    One linear pass per line pair, where a word-level alignment cost a page of 500 files a
    third of its time. A line rewritten as a whole (little in common) is left unmarked.
    """
    if len(old) > MAX_WORD_DIFF_CHARS or len(new) > MAX_WORD_DIFF_CHARS:
        return None, None
    a, b = _WORDS.findall(old), _WORDS.findall(new)
    shortest = min(len(a), len(b))
    head = 0
    while head < shortest and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    if 2 * (head + tail) < 0.3 * (len(a) + len(b)):
        return None, None  # a rewritten line: marking every word says nothing
    return _span(a, head, len(a) - tail), _span(b, head, len(b) - tail)


def _span(words: list[str], start: int, stop: int) -> Mark:
    if start >= stop:
        return None
    first = sum(map(len, words[:start]))
    return first, first + sum(map(len, words[start:stop]))


def _sides(hunk: Hunk, split: bool) -> tuple[list[Line], list[Line]]:
    """The hunk's shown lines of the old file and of the new one (context lines in both)."""
    if split:
        return [left for left, _ in hunk.rows if left is not None], [
            right for _, right in hunk.rows if right is not None
        ]
    return [line for line in hunk.lines if line.kind != "add"], [line for line in hunk.lines if line.kind != "del"]


def _paint(item: FileDiff, split: bool, budget: int) -> tuple[int, bool]:
    """Write the HTML of every shown line of ``item``: highlighted when the file's lexer is known
    and its shown lines fit in ``budget`` (what is left of the page's), plain otherwise. Returns
    the characters lexing takes, and whether only the page's budget kept the file plain.

    Each side of a hunk is lexed as one text (a line's colours depend on the lines before it):
    the new side colours the context and added lines, the old side the removed ones.
    """
    sides = [_sides(hunk, split) for hunk in item.hunks]
    # The old side of a hunk that removes nothing is not lexed (its context is the new side's).
    lexed = [(old if any(line.kind == "del" for line in old) else [], new) for old, new in sides]
    cost = sum(len(line.text) for old, new in lexed for line in (*old, *new))
    lexer = lexer_for(item.path) if cost <= MAX_HIGHLIGHT_BYTES else None
    waiting = lexer is not None and cost > budget
    if lexer is not None and not waiting:
        item.highlighted = True
        for old, new in lexed:
            _colour(lexer, new, ("context", "add"))
            _colour(lexer, old, ("del",))
    for old, new in sides:
        for line in (*old, *new):
            if not line.html and line.text:
                line.html = html.escape(line.text) if line.mark is None else line_html([("", line.text)], line.mark)
    return cost, waiting


def _colour(lexer: Lexer, lines: list[Line], kinds: tuple[str, ...]) -> None:
    if lines:
        for line, tokens in zip(lines, tokens_by_line(lexer, [line.text for line in lines]), strict=True):
            if line.kind in kinds:
                line.html = line_html(tokens, line.mark)


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
