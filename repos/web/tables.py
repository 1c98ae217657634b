"""The big tables of the pages — a file's lines, a blame, a diff — built as HTML strings here.

A template loop costs Django 20-40 µs per row and cell; a 2 000-line blame or a 500-file diff
spent over a second in them (measured with ``agentgit_bench web``). These functions write the
same markup with f-strings. Every piece of text is escaped here (``html.escape``), or is line
HTML already escaped by ``render``/``diffs``; the result is marked safe for the template.
"""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from django.utils.safestring import SafeString, mark_safe

from .diffs import FileDiff, TreeRow


def code_table(lines: list[str], highlighted: bool) -> SafeString:
    """A file's lines (HTML each) with numbered, anchored rows (``#L10``)."""
    rows = "".join(
        f'<tr id="L{n}"><td class="num"><a href="#L{n}">{n}</a></td><td class="src">{line}</td></tr>'
        for n, line in enumerate(lines, start=1)
    )
    css = "code hl" if highlighted else "code"
    return mark_safe(f'<table class="{css}"><colgroup><col class="num-col"><col></colgroup>{rows}</table>')


def blame_table(hunks: list[dict], *, changeset_url: str, blame_url: str, when, highlighted: bool) -> SafeString:
    """Blame hunks: the changeset, agent, summary, age and "blame the parent" once per hunk;
    each line as HTML already (``render.text_lines``).

    ``changeset_url`` and ``blame_url`` are URL prefixes the ids are appended to; ``when(time)``
    is the ``<time>`` markup of a moment. A hunk's ``path`` is the file's in its changeset, and
    its ``parent`` the changeset "blame the parent" opens (None: no link).
    """
    out = [
        f'<table class="blame code{" hl" if highlighted else ""}"><colgroup><col class="who-col"><col class="num-col"><col></colgroup>'
    ]
    times: dict[str, str] = {}  # one <time> per changeset: a changeset writes many hunks
    for hunk in hunks:
        info = hunk["info"]
        if info.id not in times:
            times[info.id] = when(info.time)
        summary = escape(info.summary)
        parent = ""
        if hunk["parent"]:
            # At the path the lines had in that changeset: a parent older than a rename has no other.
            quoted_path = escape(quote(hunk["path"], safe="/"))
            parent = (
                f'<a class="parent" href="{blame_url}{hunk["parent"]}/{quoted_path}#L{hunk["first"]}"'
                ' title="Blame the parent: the file as it was before this changeset">↰</a>'
            )
        who = (
            f'<td class="who age-{hunk["age"]}" rowspan="{len(hunk["lines"])}"><div class="who-line">'
            f'<a class="sha" href="{changeset_url}{info.id}">{info.id[:12]}</a>'
            f'<span class="agent">{escape(info.agent)}</span>'
            f'<span class="summary" title="{summary}">{summary}</span>'
            f'<span class="age">{times[info.id]}</span>{parent}</div></td>'
        )
        for index, (number, line) in enumerate(hunk["lines"]):
            start = ' class="hunk-start"' if index == 0 else ""
            out.append(
                f'<tr id="L{number}"{start}>{who if index == 0 else ""}'
                f'<td class="num"><a href="#L{number}">{number}</a></td><td class="src">{line}</td></tr>'
            )
    out.append("</table>")
    return mark_safe("".join(out))


def _number(value: int | None) -> str:
    return "" if value is None else str(value)


def diff_table(item: FileDiff, split: bool) -> SafeString:
    """One file's hunks, unified (old and new numbers, then the line) or side by side."""
    if not item.hunks:
        return mark_safe("")
    out = []
    hl = " hl" if item.highlighted else ""
    if split:
        out.append(
            f'<table class="diff split{hl}"><colgroup><col class="num-col"><col><col class="num-col"><col></colgroup>'
        )
        for hunk in item.hunks:
            out.append(f'<tr class="hunk"><td colspan="4">{escape(hunk.header)}</td></tr>')
            for left, right in hunk.rows:
                cells = []
                for line, number in ((left, left.old if left else None), (right, right.new if right else None)):
                    if line is None:
                        cells.append('<td class="num"></td><td class="src empty"></td>')
                    else:
                        cells.append(
                            f'<td class="num">{_number(number)}</td><td class="src {line.kind}">{line.html}</td>'
                        )
                out.append(f"<tr>{''.join(cells)}</tr>")
    else:
        out.append(
            f'<table class="diff unified{hl}"><colgroup><col class="num-col"><col class="num-col"><col></colgroup>'
        )
        for hunk in item.hunks:
            out.append(f'<tr class="hunk"><td colspan="3">{escape(hunk.header)}</td></tr>')
            out.extend(
                f'<tr class="{line.kind}"><td class="num">{_number(line.old)}</td>'
                f'<td class="num">{_number(line.new)}</td><td class="src">{line.html}</td></tr>'
                for line in hunk.lines
            )
    out.append("</table>")
    return mark_safe("".join(out))


def diff_files(files: list[FileDiff], *, split: bool, layout: str, ignore_whitespace: bool) -> SafeString:
    """Every file of a diff: a collapsible box with its status, paths, counts, note and hunks."""
    out = []
    for item in files:
        query = f"path={quote(item.path, safe='/')}&layout={layout}{'&w=1' if ignore_whitespace else ''}"
        paths = escape(f"{item.old_path} → {item.path}" if item.old_path else item.path)
        similar = f'<span class="muted">{item.similarity}% similar</span>' if item.similarity is not None else ""
        counts = (
            ""
            if item.skipped
            else f'<span class="add-count">+{item.additions}</span> <span class="del-count">−{item.deletions}</span>'
        )
        note = f'<p class="notice">{escape(item.note)}</p>' if item.note else ""
        out.append(
            f'<details class="diff-file box" id="{item.anchor}" open><summary class="box-head">'
            f'<span class="status st-{item.status}">{item.status}</span><span class="path">{paths}</span>'
            f'{similar}{counts}<span class="grow"></span>'
            f'<a href="?{escape(query)}">File diff</a></summary>{note}{diff_table(item, split)}</details>'
        )
    return mark_safe("".join(out))


def file_tree(rows: list[TreeRow]) -> SafeString:
    """The changed files as an indented tree of links to their boxes."""
    out = []
    for row in rows:
        name = escape(row.name)
        if row.file is None:
            out.append(f'<div class="depth-{min(row.depth, 12)} dir">{name}</div>')
        else:
            out.append(
                f'<div class="depth-{min(row.depth, 12)}"><a href="#{row.file.anchor}" class="st-{row.file.status}">'
                f"{name}</a></div>"
            )
    return mark_safe("".join(out))
