"""The Django project. Importing it loads the Celery app, so tasks bind to it in every process."""

from .celery import app as celery_app

__all__ = ["celery_app"]
