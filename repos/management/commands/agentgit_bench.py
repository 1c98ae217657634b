"""Benchmarks: ``manage.py agentgit_bench engine|candidates|cycle|history [--sizes ...] ...``.

``engine`` measures the engine's hot paths beside git; ``candidates`` measures the libraries the
engine could have been built on (docs/adr/0001); ``cycle`` measures the agent's cycle (upload two
files, changeset, proposal, integrate) per second over real HTTP against server (and worker)
processes it starts itself, or against a running server with ``--url``/``--token``; ``history``
measures reads over long histories with and without the derived data (graph nodes, path index).
A thin adapter: the benchmarks are ``repos.benchmarks.engine_bench``, ``.candidates``, ``.cycle``
and ``.history_bench``, the output formats are ``repos.benchmarks.report``. Prints the table; ``--json`` and ``--markdown``
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

from repos.benchmarks import cycle, deployment, git_bench, history_bench
from repos.benchmarks.candidates import format_candidates, run_candidates
from repos.benchmarks.engine_bench import (
    BACKENDS,
    DEFAULT_SAMPLES,
    DEFAULT_SIZES,
    MIN_FILES,
    OPERATIONS,
    RowResult,
    run_engine_benchmark,
)
from repos.benchmarks.report import failures_text, format_table, to_json, to_markdown


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes are comma-separated numbers of files, not {text!r}") from None
    if not sizes or min(sizes) < MIN_FILES:
        raise argparse.ArgumentTypeError(f"every size must be at least {MIN_FILES} files")
    return sizes


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated numbers of changesets, not {text!r}") from None
    if not counts or min(counts) < history_bench.MIN_COMMITS:
        raise argparse.ArgumentTypeError(f"every history must be at least {history_bench.MIN_COMMITS} changesets")
    return counts


def _choices(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        chosen = [part.strip() for part in text.split(",") if part.strip()]
        wrong = [part for part in chosen if part not in allowed]
        if not chosen or wrong:
            raise argparse.ArgumentTypeError(f"comma-separated, of: {', '.join(allowed)}")
        return chosen

    return parse


def _assignment(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"NAME=VALUE, not {text!r}")
    return name, value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


class Command(BaseCommand):
    help = (
        "Measure the engine's hot paths by repository size beside the git binary doing the same work (engine), "
        "the candidate libraries (candidates), or the agent's cycle over HTTP against real processes (cycle)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "suite", choices=["engine", "candidates", "cycle", "history", "git"], help="what to benchmark"
        )
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
        group = parser.add_argument_group("cycle", "options of the cycle suite")
        group.add_argument(
            "--modes",
            type=_choices(deployment.MODES),
            default=list(deployment.MODES),
            help="embedded (SQLite, eager, one uvicorn) and/or production (PostgreSQL, Redis, "
            "uvicorn workers, celery workers); comma-separated (default: both)",
        )
        group.add_argument(
            "--scenarios",
            type=_choices(cycle.SCENARIOS),
            default=list(cycle.SCENARIOS),
            help="streams (a stream per writer) and/or stream (all on main); default: both",
        )
        group.add_argument("--writers", type=_positive, default=16, help="closed-loop writers (default: %(default)s)")
        group.add_argument("--duration", type=float, default=15.0, help="seconds per row (default: %(default)s)")
        group.add_argument(
            "--server-workers",
            type=_positive,
            default=cycle.DEFAULT_SERVER_WORKERS,
            help="uvicorn --workers, both modes (default: two per core, as make serve)",
        )
        group.add_argument(
            "--celery-workers", type=_positive, default=2, help="celery worker processes, production mode"
        )
        group.add_argument("--celery-concurrency", type=_positive, default=1, help="pool size of each celery worker")
        group.add_argument(
            "--env",
            action="append",
            default=[],
            type=_assignment,
            metavar="NAME=VALUE",
            help="an environment variable for every process started (repeatable), e.g. AGENTGIT_LANDING_BATCH=64",
        )
        group.add_argument("--url", help="drive this running server instead of starting one (needs --token)")
        group.add_argument("--token", help="a token with scopes read,write,integrate,admin, for --url")
        group = parser.add_argument_group("git", "options of the git suite")
        group.add_argument(
            "--files", type=_positive, default=git_bench.DEFAULT_FILES, help="files of the cloned repository"
        )
        group.add_argument(
            "--streams", type=_positive, default=git_bench.DEFAULT_STREAMS, help="streams of the ls-refs row"
        )
        group = parser.add_argument_group("history", "options of the history suite")
        group.add_argument(
            "--commits",
            type=_counts,
            default=list(history_bench.DEFAULT_COMMITS),
            help="history lengths in changesets, comma-separated (default: %(default)s)",
        )

    def handle(self, *args, suite, sizes, backend, samples, json_path, markdown_path, **options) -> None:
        if suite == "git":
            self.git(options["files"], options["streams"], samples, json_path)
            return
        if suite == "history":
            self.history(options["commits"], samples, json_path, markdown_path)
            return
        if suite == "cycle":
            self.cycle(json_path, markdown_path, **options)
            return
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

    def cycle(self, json_path, markdown_path, *, modes, scenarios, writers, duration, url, token, **options) -> None:
        if url:
            if not token:
                raise CommandError("--url needs --token")
            report = cycle.run_against(url, token, scenarios=scenarios, writers=writers, duration_s=duration)
        else:
            report = cycle.run_cycle_benchmark(
                modes=modes,
                scenarios=scenarios,
                writers=writers,
                duration_s=duration,
                server_workers=options["server_workers"],
                celery_workers=options["celery_workers"],
                celery_concurrency=options["celery_concurrency"],
                env=dict(options["env"]),
                log=lambda text: self.stderr.write(text),
            )
        table = cycle.format_report(report)
        self.stdout.write(table, ending="")
        if json_path:
            Path(json_path).write_text(cycle.to_json(report))
        if markdown_path:
            Path(markdown_path).write_text(table)

    def history(self, commits, samples, json_path, markdown_path) -> None:
        with tqdm(file=sys.stderr, disable=None, unit="step") as bar:

            def on_row(name: str) -> None:
                bar.set_description(name)
                bar.update(1)

            try:
                run = history_bench.run_history_benchmark(commits, samples=samples, on_row=on_row)
            except AssertionError as error:
                raise CommandError(str(error)) from None
        table = history_bench.format_history(run)
        self.stdout.write(table, ending="")
        if json_path:
            Path(json_path).write_text(json.dumps(history_bench.history_json(run), indent=2) + "\n")
        if markdown_path:
            Path(markdown_path).write_text(table)

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

    def git(self, files: int, streams: int, samples: int, json_path: str | None) -> None:
        """Stock git through the server beside git on the repository directory (repos.benchmarks.git_bench)."""
        with tqdm(file=sys.stderr, disable=None, bar_format="{desc}") as bar:
            rows = git_bench.run_git_benchmark(files, streams, samples, progress=bar.set_description_str)
        self.stdout.write(git_bench.format_rows(rows), ending="")
        if json_path:
            Path(json_path).write_text(json.dumps(git_bench.rows_json(rows), indent=2) + "\n")
