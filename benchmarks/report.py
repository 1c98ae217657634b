"""A benchmark run as a text table, JSON and markdown.

Cells are milliseconds, ``median (min–max)``; a cell without a range is a single sample. Each
size has a git column beside it: git's median for the same work, empty where git has no
equivalent. Numbers keep three significant digits (as the reference prints them).
"""

from __future__ import annotations

from typing import Any

from .engine_bench import OPERATIONS, BenchRun, RowResult


def text_table(rows: list[list[str]]) -> list[str]:
    """Rows of cells (the first is the header) as the lines of a padded markdown table."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def render(row: list[str]) -> str:
        return "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths)) + " |"

    return [render(rows[0]), "|" + "|".join("-" * (width + 2) for width in widths) + "|"] + [
        render(row) for row in rows[1:]
    ]


def format_ms(value: float | None) -> str:
    """Milliseconds to three significant digits: 164, 11.2, 1.91, 0.031."""
    if value is None:
        return ""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def cell(row: RowResult | None) -> str:
    if row is None:
        return ""
    if not row.ok:
        return "not run" if row.error and row.error.startswith("not run") else "FAILED"
    if row.samples == 1:
        return format_ms(row.median_ms)
    return f"{format_ms(row.median_ms)} ({format_ms(row.min_ms)}–{format_ms(row.max_ms)})"


def git_cell(row: RowResult | None) -> str:
    return format_ms(row.git_median_ms) if row is not None and row.ok else ""


def _header(run: BenchRun) -> list[str]:
    header = ["operation"]
    for n in run.sizes:
        header += [f"{n} files", f"git {n}"]
    return header


def _body(run: BenchRun) -> list[list[str]]:
    body = []
    for operation in OPERATIONS:
        line = [operation]
        for n in run.sizes:
            row = run.row(operation, n)
            line += [cell(row), git_cell(row)]
        body.append(line)
    return body


def conditions_line(run: BenchRun) -> str:
    c = run.conditions
    return (
        f"backend {c['backend']}, {c['samples']} samples, {c['python']}, {c['cpu_count']} CPUs, "
        f"{c['platform']}, git {c['git_version'] or 'not run'}, commit {c['commit'] or 'none'}, {c['timestamp']}"
    )


def failures_text(run: BenchRun) -> str:
    return "\n".join(f"{row.operation} at {row.files} files: {row.error}" for row in run.failures)


def format_table(run: BenchRun) -> str:
    """An aligned plain-text table (with the conditions above it and the failures below it)."""
    header, body = _header(run), _body(run)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def render(line: list[str]) -> str:
        first = line[0].ljust(widths[0])
        rest = [text.rjust(width) for text, width in zip(line[1:], widths[1:])]
        return "  ".join([first, *rest]).rstrip()

    lines = [f"Milliseconds, median (min–max); {conditions_line(run)}", render(header)]
    lines.append("  ".join("-" * width for width in widths))
    lines += [render(line) for line in body]
    if run.failures:
        lines += ["", "FAILED:", failures_text(run)]
    return "\n".join(lines) + "\n"


def to_markdown(run: BenchRun) -> str:
    header, body = _header(run), _body(run)
    lines = [
        "Milliseconds, median (min–max); git: `git` doing the same work as a subprocess (median).",
        f"Conditions: {conditions_line(run)}.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(line) + " |" for line in body]
    return "\n".join(lines) + "\n"


def to_json(run: BenchRun) -> dict[str, Any]:
    """``{"conditions": {...}, "rows": [{operation, files, median_ms, min_ms, max_ms, samples, git_median_ms}]}``."""
    return {"conditions": run.conditions, "rows": [row.as_dict() for row in run.rows]}
