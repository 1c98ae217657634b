"""Content as pages show it: highlighted lines, rendered READMEs, and the limits that keep big
inputs usable.

Everything returned as HTML here is built from escaped text (``html.escape``) or sanitized
(``nh3``); templates mark only these values safe.
"""

from __future__ import annotations

import fnmatch
import functools
import html
import posixpath
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

import markdown
import nh3
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_for_filename
from pygments.lexers._mapping import LEXERS
from pygments.lexers.special import TextLexer
from pygments.token import STANDARD_TYPES, Whitespace
from pygments.util import ClassNotFound

from engine.objects import is_binary, split_lines

#: Above this size a file is not shown at all, only offered raw (GitHub draws the line at ~1 MB).
MAX_DISPLAY_BYTES = 1024 * 1024
#: Above this size a shown file is not highlighted (lexing costs ~1 s per MB).
MAX_HIGHLIGHT_BYTES = 256 * 1024
#: Characters of one line shown; the rest is cut (a minified file's megabyte line).
MAX_LINE_CHARS = 5_000
#: READMEs above this size are shown as a link, not rendered.
MAX_README_BYTES = 512 * 1024

K = TypeVar("K")
V = TypeVar("V")

IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
    ".ico": "image/x-icon",
    ".svg": "image/svg+xml",
}
README_NAMES = ("README.md", "README.markdown", "README", "README.txt", "readme.md", "Readme.md")


def image_type(path: str) -> str | None:
    """The image media type of a path by its extension, or None."""
    return IMAGE_TYPES.get(posixpath.splitext(path)[1].lower())


def cut_line(text: str) -> tuple[str, bool]:
    """``text`` shortened to :data:`MAX_LINE_CHARS`, and whether it was cut."""
    if len(text) <= MAX_LINE_CHARS:
        return text, False
    return text[:MAX_LINE_CHARS], True


@dataclass
class FileLines:
    """A text file ready to show: one HTML string per line (escaped, maybe highlighted)."""

    lines: list[str]
    highlighted: bool
    #: Line numbers (1-based) that were cut at :data:`MAX_LINE_CHARS`.
    cut: list[int]


def display_text(raw: bytes) -> str:
    """One line as shown: decoded, without its line ending (``\r\n`` too: a CR left in the
    page is a line break of its own to the HTML parser; one inside the line is shown as ␍)."""
    text = raw.decode("utf-8", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    if text.endswith("\r"):
        text = text[:-1]
    return text.replace("\r", "␍") if "\r" in text else text  # a CR inside a line: shown as ␍


def text_lines(path: str, data: bytes, blob_id: str | None = None) -> FileLines:
    """The lines of a text file as HTML, highlighted by file name when small enough.

    With ``blob_id`` highlighted lines are remembered (32 M characters of HTML): a blob
    never changes, lexing it costs 2-5 µs a byte, and its file and blame pages show the same lines.
    """
    lexer = lexer_for(path) if len(data) <= MAX_HIGHLIGHT_BYTES else None
    key = (blob_id, type(lexer).__name__) if blob_id and lexer is not None else None
    found = _highlighted.get(key) if key else None
    if found is not None:
        return found
    texts = []
    cut = []
    for number, raw in enumerate(split_lines(data), start=1):
        text, was_cut = cut_line(display_text(raw))
        if was_cut:
            cut.append(number)
        texts.append(text)
    if lexer is None:
        return FileLines([html.escape(text) for text in texts], False, cut)
    shown = FileLines(highlight(lexer, texts), True, cut)
    if key:
        _highlighted.put(key, shown, sum(map(len, shown.lines)))
    return shown


# ------------------------------------------------------------------------------ highlighting


class SizedCache(Generic[K, V]):
    """A map kept per process that forgets its least recently used entries past ``capacity``
    (the sum of the sizes given); an entry over ``capacity // 4`` is not kept. Thread-safe."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V, size: int) -> None:
        with self._lock:
            if key in self._entries or size > self.capacity // 4:
                return
            self._entries[key] = (value, size)
            self._size += size
            while self._size > self.capacity:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._size -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0


#: Highlighted files per (blob, lexer), up to 32 M characters of HTML.
_highlighted: SizedCache[tuple[str, str], FileLines] = SizedCache(32_000_000)


def _special_patterns() -> re.Pattern[str]:
    """Pygments' file name patterns other than ``*.ext``: names (``Makefile``) and globs."""
    patterns = [
        fnmatch.translate(pattern)
        for _module, _name, _aliases, filenames, _types in LEXERS.values()
        for pattern in filenames
        if not (pattern.startswith("*.") and "*" not in pattern[2:])
    ]
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns))


_SPECIAL = _special_patterns()


def lexer_for(path: str) -> Lexer | None:
    """The Pygments lexer of a file by its name, or None (plain text, or none known).

    Pygments tries each of its ~900 patterns on every name (0.4 ms): a diff of 500 files would
    spend 200 ms there. A name no special pattern matches is looked up by its extensions alone
    (``f1.py`` → ``.py``), which every ``*.ext`` pattern decides the same way, and remembered.
    """
    name = posixpath.basename(path)
    dot = name.find(".")
    key = name
    if dot > 0 and not _SPECIAL.match(name):
        key = name[dot:]
        if _SPECIAL.match(key):
            key = name
    return _lexer_named(key)


@functools.lru_cache(maxsize=4096)
def _lexer_named(name: str) -> Lexer | None:
    try:
        lexer = get_lexer_for_filename(name, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None
    return None if isinstance(lexer, TextLexer) else lexer


Tokens = list[tuple[str, str]]


def tokens_by_line(lexer: Lexer, texts: list[str]) -> list[Tokens]:
    """Lex the lines as one text; each line's ``(css class, text)`` pieces.

    The raw token stream (no Pygments preprocessing: it would turn a lone CR into a line of its
    own) of the lines joined by "\n", split back at each "\n": as many lines come back as went in.
    """
    out: list[Tokens] = []
    current: Tokens = []
    for _index, token_type, value in lexer.get_tokens_unprocessed("\n".join(texts) + "\n"):
        css = _css_class(token_type)
        for index, piece in enumerate(value.split("\n") if "\n" in value else (value,)):
            if index:
                out.append(current)
                current = []
            if not piece:
                continue
            if current and current[-1][0] == css:  # one span for a run of one class ("hello " is 4 tokens)
                current[-1] = (css, current[-1][1] + piece)
            else:
                current.append((css, piece))
    out.append(current)
    return out[: len(texts)] + [[] for _ in range(len(texts) - len(out))]


def line_html(tokens: Tokens, mark: tuple[int, int] | None = None) -> str:
    """A line's pieces as escaped HTML, ``<span class>`` each; the characters ``mark`` spans
    (start, stop) wrapped in ``<span class="x">`` (a diff's changed words), token spans cut
    at its edges so that the tags nest."""
    if mark is None:
        return "".join(
            f'<span class="{css}">{html.escape(text)}</span>' if css else html.escape(text) for css, text in tokens
        )
    start, stop = mark
    out = []
    position = 0
    for css, text in tokens:
        end = position + len(text)
        cuts = [position, *(edge for edge in (start, stop) if position < edge < end), end]
        for first, last in zip(cuts, cuts[1:], strict=False):
            if first == start:
                out.append('<span class="x">')
            piece = html.escape(text[first - position : last - position])
            out.append(f'<span class="{css}">{piece}</span>' if css else piece)
            if last == stop:
                out.append("</span>")
        position = end
    return "".join(out)


def highlight(lexer: Lexer, texts: list[str]) -> list[str]:
    """The lines lexed as one text, as HTML lines of ``<span class>`` pieces.

    Pygments' own HTML formatter lets a token (a docstring) span several lines; splitting its
    output would cut a ``<span>`` in two, so the lines are built here, token by token. Only
    Pygments' class names are written (styles come from ``pygments.css``: no inline style).
    """
    return [line_html(tokens) for tokens in tokens_by_line(lexer, texts)]


_CLASSES: dict = {}


def _css_class(token_type) -> str:
    css = _CLASSES.get(token_type)
    if css is None:
        kind = token_type
        while kind not in STANDARD_TYPES:
            kind = kind.parent
        # Whitespace gets no span: no style colours it.
        css = _CLASSES[token_type] = "" if kind in Whitespace else STANDARD_TYPES[kind]
    return css


def markdown_html(text: str) -> str:
    """Markdown rendered to HTML and sanitized: no scripts, handlers, styles or frames survive."""
    rendered = markdown.markdown(text, extensions=["fenced_code", "tables", "sane_lists"], output_format="html")
    return nh3.clean(rendered, link_rel="noopener noreferrer nofollow")


def classify(path: str, data: bytes) -> str:
    """How a file is shown: ``image``, ``binary``, ``too_large`` or ``text``."""
    if image_type(path):
        return "image"
    if is_binary(data):
        return "binary"
    if len(data) > MAX_DISPLAY_BYTES:
        return "too_large"
    return "text"
