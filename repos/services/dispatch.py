"""After-commit work: one dispatcher and one retry policy, with a broker or without.

A service with work to do once its transaction commits (land a stream's queue, derive a long
history) declares it as a :class:`Job` — a Celery task name, the service function, and its
:class:`Retry` policy — and hands it over with :func:`after_commit`:

* **with a broker** the job is sent by name through the Celery app (``send_task``) to the worker
  pool. workers/tasks.py makes each job a Celery task of that name, with the job's policy as
  Celery's autoretry. Services never import the workers: the name is the only link.
* **without a broker** (the embedded default) the job runs in this process once the transaction
  commits, without Celery's eager machinery, and the same policy retries it: a transient
  database failure runs it again after Celery's own backoff schedule, from a timer thread, so the
  request that committed is not held while it waits.

Jobs are idempotent (landing a drained queue, deriving what is derived: nothing happens), so a
retry is always safe.

A job declared ``detached`` (webhook deliveries) never holds or fails the transaction's caller:
without a broker it runs on a small pool of threads of this process (:data:`DETACHED_THREADS`)
rather than in the request that committed, and with one, a failure to send it is logged rather
than raised (the work it would have done is found again from the database:
repos/services/webhooks.py).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections, transaction

from agentgit_site.celery import app as celery_app

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retry:
    """When and how often a job is tried again (Celery's autoretry options, by meaning)."""

    #: Transient failures: a lost connection, a deadlock victim, too many clients, a locked database.
    on: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
    #: Tries after the first.
    retries: int = 8
    #: Exponential backoff: up to ``backoff_s × 2^n`` seconds before try n + 1 (full jitter) …
    backoff_s: int = 1
    #: … and never more than this.
    backoff_max_s: int = 30

    def countdown(self, retries_so_far: int) -> float:
        """Seconds before the next try, as Celery computes it."""
        return get_exponential_backoff_interval(self.backoff_s, retries_so_far, self.backoff_max_s, full_jitter=True)


@dataclass(frozen=True)
class Job:
    """After-commit work: the Celery task ``name`` that runs ``run`` on a worker, retried by ``retry``."""

    name: str
    run: Callable[..., object]
    retry: Retry = Retry()
    #: Never hold or fail the committing caller (see the module's docstring).
    detached: bool = False


def jobs_run_in_process() -> bool:
    """Whether after-commit jobs run in this process (no broker: the embedded default)."""
    return bool(settings.CELERY_TASK_ALWAYS_EAGER)


def after_commit(job: Job, *args: object) -> None:
    """Run ``job.run(*args)`` once the current transaction commits (at once outside one):
    on the worker pool when there is a broker, else in this process; retried alike."""
    if jobs_run_in_process():
        run = _on_a_thread if job.detached else run_in_process
        transaction.on_commit(lambda: run(job, args))
    else:
        transaction.on_commit(lambda: celery_app.send_task(job.name, args=args), robust=job.detached)


def later(job: Job, delay_s: float, *args: object) -> None:
    """Run ``job.run(*args)`` ``delay_s`` seconds after the current transaction commits: a
    countdown on the worker pool with a broker, a timer thread of this process without one (a
    process that exits takes its timers along: what they would have done is found again by
    recovery, or by the next request that drives the same job)."""
    if settings.CELERY_TASK_ALWAYS_EAGER:

        def start() -> None:
            timer = threading.Timer(delay_s, lambda: _on_a_timer(job, args))
            timer.daemon = True
            timer.start()

        transaction.on_commit(start)
    else:
        transaction.on_commit(lambda: celery_app.send_task(job.name, args=args, countdown=delay_s), robust=True)


def _on_a_timer(job: Job, args: tuple) -> None:
    try:
        run_in_process(job, args)
    except Exception:  # not transient: nobody is waiting on this thread to hear it
        logger.exception("%s%r failed; left to recovery", job.name, args)
    finally:
        connections.close_all()  # this thread's own connections, opened by the job


#: Threads of a process without a broker that run detached jobs: a bound on what slow
#: receivers can hold, whatever the number of deliveries waiting. Daemon threads: a process
#: that exits does not wait for them (what they had not done is pending in the database).
DETACHED_THREADS = 4
_detached_work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_detached_threads: list[threading.Thread] = []
_detached_start = threading.Lock()
#: Detached jobs queued or running in this process, and the condition their ends notify.
_detached_pending = 0
_detached_idle = threading.Condition()


def _on_a_thread(job: Job, args: tuple, retries_so_far: int = 0) -> None:
    def run() -> None:
        try:
            run_in_process(job, args, retries_so_far)
        except Exception:  # not transient: nobody is waiting on this thread to hear it
            logger.exception("%s%r failed", job.name, args)
        finally:
            connections.close_all()  # this thread's own connections, opened by the job

    global _detached_pending
    with _detached_start:
        while len(_detached_threads) < DETACHED_THREADS:
            _detached_threads.append(threading.Thread(target=_run_detached, name="detached-job", daemon=True))
            _detached_threads[-1].start()
    with _detached_idle:
        _detached_pending += 1
    _detached_work.put(run)


def _run_detached() -> None:
    global _detached_pending
    while True:
        work = _detached_work.get()
        try:
            work()
        finally:
            with _detached_idle:
                _detached_pending -= 1
                _detached_idle.notify_all()


def wait_for_detached(timeout_s: float) -> bool:
    """Whether every detached job of this process has ended, waiting up to ``timeout_s`` (a
    test that stands for the process stopping: a power loss stops its threads as well)."""
    with _detached_idle:
        return _detached_idle.wait_for(lambda: _detached_pending == 0, timeout_s)


def run_in_process(job: Job, args: tuple, retries_so_far: int = 0) -> None:
    """Run the job here; on a transient failure, try again later on a timer thread (as a worker
    would), up to the policy's retries, then log it: the next landing of the stream or the next
    recovery finishes the work."""
    try:
        job.run(*args)
        return
    except job.retry.on:
        if retries_so_far >= job.retry.retries:
            logger.error("%s%r failed %d times; left to recovery", job.name, args, retries_so_far + 1, exc_info=True)
            return
        logger.warning("%s%r met a transient failure; retrying", job.name, args, exc_info=True)

    def again() -> None:
        if job.detached:  # on the pool, not on the timer's own thread
            _on_a_thread(job, args, retries_so_far + 1)
            return
        try:
            run_in_process(job, args, retries_so_far + 1)
        except Exception:  # not transient: nobody is waiting on this thread to hear it
            logger.exception("%s%r failed; left to recovery", job.name, args)
        finally:
            connections.close_all()  # this thread's own connections, opened by the job

    timer = threading.Timer(job.retry.countdown(retries_so_far), again)
    timer.daemon = True
    timer.start()
