"""Celery tasks: thin adapters over repos.services (tasks take ids, never objects)."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready

from repos.services import integration


@shared_task(name="workers.tasks.land_stream")
def land_stream(stream_id: int) -> int:
    """Drain a stream's landing queue (one worker at a time per stream: the stream's row lock)."""
    return integration.land_stream(stream_id)


@shared_task(name="workers.tasks.recover")
def recover() -> int:
    """Land every operation a crash left queued; scheduled by beat, and run at worker start."""
    return integration.recover()


@worker_ready.connect
def _recover_at_start(**_kwargs) -> None:
    recover.delay()
