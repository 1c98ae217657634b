"""Import a local git repository: every branch a stream, commit ids unchanged (repos.services.imports)."""

import resource
import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from repos.errors import ApiError
from repos.services import imports


class Command(BaseCommand):
    help = "Import the git repository SOURCE (a path or file://) as the repository NAME; again: only what is new."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="The AgentGit repository (created if it does not exist).")
        parser.add_argument("source", help="A local git repository: a path or a file:// URL.")

    def handle(self, *args, **options) -> None:
        bars: dict[str, tqdm] = {}

        def progress(step: str, done: int, total: int) -> None:
            bar = bars.get(step)
            if bar is None or bar.total != total:
                # Shown in a log too (not only on a terminal): an import of a long history
                # takes minutes, and its rate and estimate are what tell a stall from progress.
                unit = "step" if total == 1 else "changeset"
                bar = bars[step] = tqdm(total=total, desc=step, unit=unit, file=sys.stderr, mininterval=1.0)
            bar.update(done - bar.n)
            if done == total:  # a step done stops its clock (the next step has a bar of its own)
                bar.close()

        try:
            result = imports.import_repository(options["name"], options["source"], progress=progress)
        except ApiError as error:
            raise CommandError(error.message) from None
        finally:
            for bar in bars.values():
                bar.close()
        self.stdout.write(
            f"{result.repository}: {'created, ' if result.created else ''}{result.changesets} changeset(s) recorded; "
            f"streams created {len(result.created_streams)}, fast-forwarded {len(result.moved_streams)}, "
            f"unchanged {len(result.unchanged_streams)}"
        )
        for branch, why in sorted(result.skipped.items()):
            self.stderr.write(f"skipped {branch}: {why}")
        self.stdout.write(
            f"peak memory: {_peak_mib()} MiB in this process, {_peak_mib(resource.RUSAGE_CHILDREN)} MiB in git's fetch"
        )


def _peak_mib(who: int = resource.RUSAGE_SELF) -> int:
    return resource.getrusage(who).ru_maxrss // 1024  # Linux reports KiB
