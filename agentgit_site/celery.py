"""The Celery app. Its configuration is Django's settings (``CELERY_*``); tasks live in ``workers``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentgit_site.settings")

app = Celery("agentgit")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
