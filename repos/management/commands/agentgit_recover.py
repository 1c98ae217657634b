"""Finish what a crash or an upgrade left behind: queued integrations, missing derived data, code search's
index, the ref mirror.

Celery workers do this at start and on the beat schedule; the embedded default has no worker,
so ``make serve`` runs this before the server starts. Safe to run at any time, any number of
times, beside a running server. The ref mirrors it rebuilds are those of the repositories with
events since their last rebuild (docs/adr/0021), every one with ``--full-mirror``.
"""

import sys

from django.core.management.base import BaseCommand
from tqdm import tqdm

from repos.services import integration, refmirror, search


class Command(BaseCommand):
    help = "Land the integrations a crash left queued and derive every head's missing data."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--full-mirror",
            action="store_true",
            help="check every ref of every repository's mirror, not only those of what changed since the "
            "last rebuild (after refs were changed or removed by hand)",
        )

    def handle(self, *args, **options) -> None:
        # Deriving a long history after an upgrade takes a while: a bar per stream, on a terminal.
        bars: dict[str, tqdm] = {}

        def progress(stream: str, done: int, total: int) -> None:
            bar = bars.get(stream)
            if bar is None:
                bar = bars[stream] = tqdm(
                    total=total, desc=f"deriving {stream}", unit="changeset", file=sys.stderr, disable=None
                )
            bar.update(done - bar.n)
            if done == total:
                bar.close()

        recovery = integration.recover(progress)
        # The ref mirror follows the database, whatever a crash left on disk.
        refs = refmirror.rebuild_all(everything=options["full_mirror"])
        # Code search's index (derived data): what the heads hold that it lacks, a bar per stream.
        search_bars: dict[tuple[str, str], tqdm] = {}

        def search_progress(step: search.IndexProgress) -> None:
            key = (step.repository, step.stream)
            bar = search_bars.get(key)
            if bar is None:
                bar = search_bars[key] = tqdm(
                    total=step.total,
                    desc=f"indexing {step.repository}:{step.stream} for search",
                    unit="blob",
                    file=sys.stderr,
                    disable=None,
                )
            bar.update(step.done - bar.n)
            if step.done == step.total:
                bar.close()

        indexed = search.index_missing(progress=search_progress)
        self.stdout.write(
            f"recovered: {recovery.landed} queued integration(s) landed, {recovery.derived} changeset(s) derived, "
            f"{indexed} blob(s) indexed for search, {refs} mirrored ref(s) repaired"
        )
