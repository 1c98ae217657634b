"""Celery tasks: thin adapters over repos.services (tasks take ids, never objects)."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready
from django.db import InterfaceError, OperationalError

from repos.services import derived, integration, maintenance, refmirror

# A landing that meets a transient database failure (a lost connection, a deadlock victim, too
# many clients) is tried again shortly, rather than leaving its operations queued until the next
# landing of that stream or the next scheduled recovery. Landing is idempotent.
_TRANSIENT = (OperationalError, InterfaceError)


@shared_task(
    name="workers.tasks.land_stream",
    autoretry_for=_TRANSIENT,
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=8,
)
def land_stream(stream_id: int) -> int:
    """Drain a stream's landing queue (one worker at a time per stream: the stream's row lock)."""
    return integration.land_stream(stream_id)


@shared_task(name="workers.tasks.recover")
def recover() -> int:
    """Land every operation a crash left queued and derive what is missing; scheduled by beat,
    and run at worker start. Returns how many operations it landed."""
    return integration.recover().landed


@shared_task(name="workers.tasks.rebuild_mirrors")
def rebuild_mirrors() -> int:
    """Make every repository's ref mirror what the database says (run at worker start: a crash
    between a landing's commit and its mirror write left it behind). Returns refs changed."""
    return refmirror.rebuild_all()


@shared_task(name="workers.tasks.maintain")
def maintain() -> int:
    """Repack the repositories that need it and sweep their ref mirrors (scheduled by beat);
    returns how many were repacked."""
    return sum(state.outcome == "done" for state in maintenance.maintain_all())


@shared_task(name="workers.tasks.derive_missing", autoretry_for=_TRANSIENT, retry_backoff=1, max_retries=8)
def derive_missing() -> int:
    """Derive the heads a landing left underived (a history too long to derive in a landing)."""
    return derived.derive_missing()


@worker_ready.connect
def _recover_at_start(**_kwargs) -> None:
    recover.delay()
    rebuild_mirrors.delay()
