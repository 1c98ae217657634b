"""Celery tasks: thin adapters over repos.services (tasks take ids, never objects).

The after-commit jobs (repos/services/dispatch.py) register here as tasks of their own names,
with their own retry policy as Celery's autoretry: a landing that meets a transient database
failure (a lost connection, a deadlock victim, too many clients) is tried again shortly, rather
than leaving its operations queued until the next landing of that stream or the next scheduled
recovery. Services send them by name; they never import this module.
"""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready

from repos.services import events, integration, maintenance, packs, refmirror, search, webhooks
from repos.services.dispatch import Job


def task_for(job: Job):
    """The Celery task that runs ``job`` on a worker, under its name and with its retry policy."""
    return shared_task(
        name=job.name,
        autoretry_for=job.retry.on,
        retry_backoff=job.retry.backoff_s,
        retry_backoff_max=job.retry.backoff_max_s,
        retry_jitter=True,
        max_retries=job.retry.retries,
    )(job.run)


#: Drain a stream's landing queue (one worker at a time per stream: the stream's row lock).
land_stream = task_for(integration.LAND_STREAM)
#: Derive the heads a landing left underived.
derive_missing = task_for(integration.DERIVE_MISSING)
#: Make the deliveries of a repository's new events (repos.services.webhooks) …
pump_webhooks = task_for(webhooks.PUMP)
#: … and send each, retried with backoff while the receiver fails.
send_webhook = task_for(webhooks.SEND)
#: Fold a repository's small packs into one (a write found too many).
roll_up_packs = task_for(packs.ROLL_UP)
#: Index a landed head for code search, and what recovery found the index lacks.
index_search = task_for(search.INDEX_HEAD)
index_search_missing = task_for(search.INDEX_MISSING)


@shared_task(name="workers.tasks.recover")
def recover() -> int:
    """Land every operation a crash left queued and derive what is missing; scheduled by beat,
    and run at worker start. Returns how many operations it landed."""
    return integration.recover().landed


@shared_task(name="workers.tasks.rebuild_mirrors")
def rebuild_mirrors() -> int:
    """Make the ref mirror of every repository with events since its last rebuild what the
    database says (run at worker start: a crash between a landing's commit and its mirror write
    left it behind, and that landing's event names it). Returns refs changed."""
    return refmirror.rebuild_all()


@shared_task(name="workers.tasks.maintain")
def maintain() -> int:
    """Repack the repositories that changed since their last maintenance and need it, and sweep
    their ref mirrors (scheduled by beat); returns how many were repacked."""
    return sum(state.outcome == "done" for state in maintenance.maintain_all())


@shared_task(name="workers.tasks.prune_events")
def prune_events() -> int:
    """Delete outbox rows older than ``AGENTGIT["EVENT_RETENTION_S"]``; scheduled by beat, and
    run at worker start. Returns how many it deleted."""
    return events.prune()


@shared_task(name="workers.tasks.resume_webhooks")
def resume_webhooks() -> int:
    """Make the deliveries whose events' pumps were lost (a crash, a broker outage) and send
    what was left pending; scheduled by beat, and run at worker start. Returns how many it made."""
    return webhooks.resume()


@worker_ready.connect
def _recover_at_start(**_kwargs) -> None:
    recover.delay()
    rebuild_mirrors.delay()
    prune_events.delay()
    resume_webhooks.delay()
    index_search_missing.delay()  # code search's index: what the heads hold that it lacks
