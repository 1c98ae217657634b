"""Empty the metrics directory before a deployment starts (``make serve`` runs it).

Every server and worker process keeps its counters in files there, and a scrape sums them all
(repos.services.metrics); files left by the processes of an earlier start would be summed too.
Run it before starting the servers and workers, never while they run.
"""

from django.core.management.base import BaseCommand

from repos.services import metrics


class Command(BaseCommand):
    help = "Empty the metrics directory (PROMETHEUS_MULTIPROC_DIR); run before any server or worker starts."

    def handle(self, *args, **options) -> None:
        directory = metrics.reset_directory()
        self.stdout.write(f"metrics: {directory} emptied")
