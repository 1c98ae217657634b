"""Repack repositories and sweep their ref mirrors (repos.services.maintenance); beat does the
same every AGENTGIT_MAINTAIN_EVERY_S seconds when there are workers. Safe beside a running server."""

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from repos.errors import ApiError
from repos.services import maintenance, repositories


class Command(BaseCommand):
    help = "Repack the repositories that need it (every one with --force) and sweep their ref mirrors."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", help="Repositories (default: all).")
        parser.add_argument("--force", action="store_true", help="Repack even below the thresholds.")

    def handle(self, *args, **options) -> None:
        try:
            targets = [repositories.get_repository(name) for name in options["names"]] or list(
                repositories.list_repositories()
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
