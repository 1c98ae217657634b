"""Repack repositories and sweep their ref mirrors (repos.services.maintenance); beat does the
same every AGENTGIT_MAINTAIN_EVERY_S seconds when there are workers. Safe beside a running server.

Without names, the repositories that changed since their last maintenance (``make serve``'s
start costs what changed, not every repository: docs/adr/0021); ``--all`` or ``--force``, every one.
"""

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from repos.errors import ApiError
from repos.services import maintenance, repositories


class Command(BaseCommand):
    help = (
        "Repack the repositories that need it and sweep their ref mirrors: those named, else those that "
        "changed since their last maintenance (every one with --all; --force repacks every one)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", help="Repositories (default: those that changed since).")
        parser.add_argument("--all", action="store_true", help="Every repository, changed or not.")
        parser.add_argument("--force", action="store_true", help="Repack every repository, even below the thresholds.")

    def handle(self, *args, **options) -> None:
        try:
            targets = [repositories.get_repository(name) for name in options["names"]] or list(
                maintenance.changed_repositories(everything=options["all"] or options["force"])
            )
        except ApiError as error:
            raise CommandError(error.message) from None
        for repository in tqdm(targets, desc="maintaining", unit="repository", disable=None):
            state = maintenance.maintain(repository, force=options["force"])
            self.stdout.write(
                f"{state.repository}: {state.outcome} in {state.duration_s:.3f} s; loose objects "
                f"{state.loose_before} -> {state.loose_after}, packs {state.packs_before} -> {state.packs_after}"
                + (f"; {state.error.strip()}" if state.error else "")
            )
        if not targets:
            self.stdout.write("maintenance: no repository changed since its last maintenance")
