"""How content is turned into page lines: the lexer chosen for a name, lines lexed as one text,
changed words marked inside highlighted lines. No database: plain functions."""

from __future__ import annotations

import pytest
from pygments.lexers import get_lexer_for_filename
from pygments.util import ClassNotFound

from repos.web.render import display_text, highlight, lexer_for, line_html, text_lines, tokens_by_line

NAMES = [
    "src/app.py", "a.pyi", "x.c", "x.h", "Makefile", "Makefile.am", "GNUmakefile", "CMakeLists.txt", "docs/todo.txt",
    "notes.txt", "README", "x.tar.gz", ".bashrc", "a.bashrc", "Dockerfile", "a.Spec.hs", "b.spec", "Kconfig.debug",
    "y.min.js", "z.tsx", "lib.rs", "style.css", "index.html", "setup.cfg", "pyproject.toml", "ci.yaml", ".gitignore",
    "start.S", "a.R", "makefile.txt", "archive.unknown-extension", "Gemfile", "x.Rakefile", "meson.build", "caf\\xe9.py",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_the_lexer_of_a_name_is_the_one_pygments_picks(name):
    try:
        expected = get_lexer_for_filename(name.rsplit("/", 1)[-1])
    except ClassNotFound:
        expected = None
    found = lexer_for(name)
    if expected is None or type(expected).__name__ == "TextLexer":
        assert found is None  # plain text is escaped, not lexed
    else:
        assert type(found) is type(expected)


def test_a_multi_line_string_keeps_its_colour_on_every_line_and_html_stays_text():
    lexer = lexer_for("a.py")
    lines = highlight(lexer, ['x = """<script>alert(1)</script>', 'still <b>inside</b>"""', "def f(): pass"])
    assert lines[0].startswith('<span class="n">x</span> <span class="o">=</span> <span class="s2">')
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in lines[0] and "<script>" not in "".join(lines)
    assert lines[1] == '<span class="s2">still &lt;b&gt;inside&lt;/b&gt;&quot;&quot;&quot;</span>'
    assert lines[2].startswith('<span class="k">def</span>')


def test_changed_words_are_marked_inside_the_token_spans_with_nested_tags():
    (tokens,) = tokens_by_line(lexer_for("a.py"), ['    return "hello, " + name'])
    marked = line_html(tokens, (17, 27))  # ', " + name'
    assert marked == (
        '    <span class="k">return</span> <span class="s2">&quot;hello</span>'
        '<span class="x"><span class="s2">, &quot;</span> <span class="o">+</span> <span class="n">name</span></span>'
    )
    assert line_html([("", "a<b>c")], (1, 4)) == 'a<span class="x">&lt;b&gt;</span>c'


def test_line_endings_leave_the_text_and_a_lone_cr_is_shown():
    assert display_text(b"line\r\n") == "line" and display_text(b"line\n") == "line" and display_text(b"last") == "last"
    assert display_text(b"a\rb\n") == "a\u240db"
    shown = text_lines("crlf.py", b"x = 1\r\ny = 2\r\n")
    assert shown.highlighted and len(shown.lines) == 2 and "\r" not in "".join(shown.lines)
    assert len(tokens_by_line(lexer_for("a.py"), ["a\rb", "c"])) == 2  # a CR is not a line break to the lexer
