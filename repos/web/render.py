"""Content as pages show it: highlighted lines, rendered READMEs, and the limits that keep big
inputs usable.

Everything returned as HTML here is built from escaped text (``html.escape``) or sanitized
(``nh3``); templates mark only these values safe.
"""

from __future__ import annotations

import html
import posixpath
from dataclasses import dataclass

import markdown
import nh3
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.token import STANDARD_TYPES
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


def text_lines(path: str, data: bytes) -> FileLines:
    """The lines of a text file as HTML, highlighted by file name when small enough."""
    texts = []
    cut = []
    for number, raw in enumerate(split_lines(data), start=1):
        text = raw.decode("utf-8", "replace").rstrip("\n")
        text, was_cut = cut_line(text)
        if was_cut:
            cut.append(number)
        texts.append(text)
    if len(data) <= MAX_HIGHLIGHT_BYTES:
        try:
            lexer = get_lexer_for_filename(path, stripnl=False, ensurenl=False)
        except ClassNotFound:
            lexer = None
        if lexer is not None and not isinstance(lexer, TextLexer):
            return FileLines(highlight(lexer, texts), True, cut)
    return FileLines([html.escape(text) for text in texts], False, cut)


def highlight(lexer, texts: list[str]) -> list[str]:
    """Lex the lines as one text and split the tokens back into lines of ``<span class>`` HTML.

    Pygments' own HTML formatter lets a token (a docstring) span several lines; splitting its
    output would cut a ``<span>`` in two, so the lines are built here, token by token.
    """
    out: list[str] = []
    current: list[str] = []
    for token_type, value in lexer.get_tokens("\n".join(texts)):
        css = _css_class(token_type)
        pieces = value.split("\n")
        for index, piece in enumerate(pieces):
            if index:
                out.append("".join(current))
                current = []
            if piece:
                escaped = html.escape(piece)
                current.append(f'<span class="{css}">{escaped}</span>' if css else escaped)
    out.append("".join(current))
    # The lexer sees the lines joined by "\n": as many lines come back as went in.
    return out[: len(texts)] + [""] * (len(texts) - len(out))


def _css_class(token_type) -> str:
    while token_type not in STANDARD_TYPES:
        token_type = token_type.parent
    return STANDARD_TYPES[token_type]


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
