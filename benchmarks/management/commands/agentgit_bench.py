"""``manage.py agentgit_bench SUITE [options]``: run one benchmark suite of benchmarks/.

A thin adapter: the subcommands, their options and what they run are benchmarks/suites.py
(``engine``, ``candidates``, ``cycle``, ``history``; ``agentgit_bench SUITE --help``). It prints
the suite's table; ``--json`` and ``--markdown`` write the same results to files. A row whose
check fails (a wrong outcome, or git disagreeing with the engine) makes the command fail with
the row named, after printing the table, and no result file is written.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...suites import SUITES, BenchmarkFailed, write_results


class Command(BaseCommand):
    help = "Run a benchmark suite: " + "; ".join(f"{suite.name}: {suite.help}" for suite in SUITES.values()) + "."

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(dest="suite", required=True, metavar="SUITE")
        for suite in SUITES.values():
            sub = subcommands.add_parser(suite.name, help=suite.help, description=suite.help)
            suite.add_arguments(sub)
            sub.add_argument("--json", dest="json_path", metavar="FILE", help="write the results as JSON")
            sub.add_argument("--markdown", dest="markdown_path", metavar="FILE", help="write a markdown table")

    def handle(self, *args: Any, suite: str, json_path: str | None, markdown_path: str | None, **options: Any) -> None:
        try:
            results = SUITES[suite].run(options, lambda text: self.stderr.write(text))
        except BenchmarkFailed as failure:
            raise CommandError(str(failure)) from None
        self.stdout.write(results.table, ending="")
        if results.failures:
            raise CommandError(results.failures)
        write_results(results, json_path, markdown_path)
