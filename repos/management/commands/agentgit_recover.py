"""Finish what a crash or an upgrade left behind: queued integrations, missing derived data.

Celery workers do this at start and on the beat schedule; the embedded default has no worker,
so ``make serve`` runs this before the server starts. Safe to run at any time, any number of
times, beside a running server.
"""

from django.core.management.base import BaseCommand

from repos.services import integration


class Command(BaseCommand):
    help = "Land the integrations a crash left queued and derive every head's missing data."

    def handle(self, *args, **options) -> None:
        recovery = integration.recover()
        self.stdout.write(
            f"recovered: {recovery.landed} queued integration(s) landed, "
            f"{recovery.derived} changeset(s) derived"
        )
