"""Benchmarks: ``manage.py agentgit_bench engine|candidates [--sizes ...] [--backend ...] ...``.

``engine`` measures the engine's hot paths beside git; ``candidates`` measures the libraries the
engine could have been built on (docs/adr/0001). A thin adapter: the benchmarks are
``repos.benchmarks.engine_bench`` and ``.candidates`` (no Django there), the output formats are
``repos.benchmarks.report``. Prints the table; ``--json`` and ``--markdown``
write the same results to files. A row whose assertion fails (a wrong outcome, or git
disagreeing with the engine) makes the command fail with the row named, after printing the
table, and no result file is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from repos.benchmarks.engine_bench import (
    BACKENDS,
    DEFAULT_SAMPLES,
    DEFAULT_SIZES,
    MIN_FILES,
    OPERATIONS,
    RowResult,
    run_engine_benchmark,
)
from repos.benchmarks.candidates import format_candidates, run_candidates
from repos.benchmarks.report import failures_text, format_table, to_json, to_markdown


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes are comma-separated numbers of files, not {text!r}") from None
    if not sizes or min(sizes) < MIN_FILES:
        raise argparse.ArgumentTypeError(f"every size must be at least {MIN_FILES} files")
    return sizes


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


class Command(BaseCommand):
    help = "Measure the engine's hot paths by repository size, beside the git binary doing the same work."

    def add_arguments(self, parser):
        parser.add_argument("suite", choices=["engine", "candidates"], help="what to benchmark")
        parser.add_argument(
            "--sizes",
            type=_sizes,
            default=list(DEFAULT_SIZES),
            help="numbers of files, comma-separated (default: %(default)s)",
        )
        parser.add_argument("--backend", choices=BACKENDS, default="memory")
        parser.add_argument("--samples", type=_positive, default=DEFAULT_SAMPLES)
        parser.add_argument("--json", dest="json_path", metavar="FILE", help="write the results as JSON")
        parser.add_argument("--markdown", dest="markdown_path", metavar="FILE", help="write a markdown table")

    def handle(self, *args, suite, sizes, backend, samples, json_path, markdown_path, **options) -> None:
        if suite == "candidates":
            self.candidates(sizes, samples, json_path, markdown_path)
            return
        # The bar shows on a terminal only (tqdm's disable=None), so logs and tests stay clean.
        with tqdm(total=len(OPERATIONS) * len(sizes), file=sys.stderr, disable=None, unit="row") as bar:

            def on_row(row: RowResult) -> None:
                bar.set_description(f"{row.files} files: {row.operation}")
                bar.update(1)

            run = run_engine_benchmark(sizes, backend=backend, samples=samples, on_row=on_row)
        self.stdout.write(format_table(run), ending="")
        if run.failures:
            raise CommandError(f"{len(run.failures)} benchmark rows failed:\n{failures_text(run)}")
        if json_path:
            Path(json_path).write_text(json.dumps(to_json(run), indent=2) + "\n")
        if markdown_path:
            Path(markdown_path).write_text(to_markdown(run))

    def candidates(self, sizes, samples, json_path, markdown_path) -> None:
        with tqdm(file=sys.stderr, disable=None, unit="cell") as bar:
            cells = run_candidates(sizes, samples=samples, on_cell=lambda cell: bar.update(1))
        table = format_candidates(cells)
        self.stdout.write(table)
        if json_path:
            rows = [cell.__dict__ for cell in cells]
            Path(json_path).write_text(json.dumps({"rows": rows}, indent=2) + "\n")
        if markdown_path:
            Path(markdown_path).write_text(table)
