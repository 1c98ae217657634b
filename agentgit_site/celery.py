"""The Celery app. Its configuration is Django's settings (``CELERY_*``); tasks live in ``workers``."""

import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentgit_site.settings")

app = Celery("agentgit")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])


@after_setup_logger.connect
@after_setup_task_logger.connect
def _redact_secrets(logger, **_kwargs) -> None:
    """Celery replaces the handlers of settings.LOGGING with its own: give them the redaction too."""
    from agentgit_site.redaction import RedactSecrets

    for handler in logger.handlers:
        handler.addFilter(RedactSecrets())
