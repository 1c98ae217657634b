"""After-commit work runs through one dispatcher, retried alike with a broker and without.

``transaction=True``: jobs run on commit, which the rollback-wrapped tests never reach.
"""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, transaction

from repos.models import Operation
from repos.services import dispatch, integration
from repos.services.content import create_changeset
from repos.services.proposals import open_proposal
from repos.services.repositories import create_repository
from workers import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def fail_first(monkeypatch, times: int = 1) -> list[int]:
    """The landing's first ``times`` batches meet a lost database connection; returns the tries."""
    tries: list[int] = []
    real = integration._land_batch

    def flaky(stream_id: int, *held) -> int:
        tries.append(stream_id)
        if len(tries) <= times:
            raise OperationalError("server closed the connection unexpectedly")
        return real(stream_id, *held)

    monkeypatch.setattr(integration, "_land_batch", flaky)
    return tries


def queued_operation() -> Operation:
    """A proposal of one changeset on a new repository, asked to integrate."""
    repository = create_repository("demo")
    ops = [{"op": "write", "path": "a.txt", "content": "a\n"}]
    head = create_changeset(repository, parent=None, operations=ops, message="m", provenance={}, credential=None)
    return integration.request_integration(open_proposal(repository, stream="main", head=head.commit_id))


def test_without_a_broker_a_landing_that_meets_a_transient_error_is_retried_and_lands(monkeypatch, stream_busy):
    tries = fail_first(monkeypatch)

    operation = integration.wait_for(queued_operation(), timeout_s=10)  # the first retry: within 1 s

    assert operation.state == Operation.State.DONE and operation.outcome["outcome"] == "fast_forward"
    assert len(tries) == 2


def test_on_a_worker_the_same_landing_is_retried_by_its_task(monkeypatch):
    monkeypatch.setattr(integration, "_enqueue_on_commit", lambda stream_id: None)  # no landing yet
    operation = queued_operation()
    tries = fail_first(monkeypatch)

    result = tasks.land_stream.apply(args=[operation.stream_id], throw=False)  # as a worker would (retries at once)

    assert result.successful()

    operation.refresh_from_db()
    assert operation.state == Operation.State.DONE and operation.outcome["outcome"] == "fast_forward"
    assert len(tries) == 2


def test_both_modes_read_one_policy():
    task, policy = tasks.land_stream, integration.LAND_STREAM.retry
    assert task.name == integration.LAND_STREAM.name
    assert (task.autoretry_for, task.max_retries, task.retry_backoff, task.retry_backoff_max) == (
        policy.on,
        policy.retries,
        policy.backoff_s,
        policy.backoff_max_s,
    )
    assert tasks.derive_missing.name == integration.DERIVE_MISSING.name


def test_in_process_retries_stop_at_the_policys_count(caplog):
    calls: list[int] = []
    done = threading.Event()

    def always_failing() -> None:
        calls.append(1)
        if len(calls) == 3:
            done.set()
        raise OperationalError("database is locked")

    job = dispatch.Job("test.always_failing", always_failing, dispatch.Retry(retries=2, backoff_s=0))
    with transaction.atomic():
        dispatch.after_commit(job)
        assert calls == []  # nothing before the commit
    assert done.wait(10)
    for timer in [t for t in threading.enumerate() if isinstance(t, threading.Timer)]:
        timer.join(5)  # the last try logs before its thread ends
    assert len(calls) == 3  # the first try and two retries, no more
    assert "failed 3 times; left to recovery" in caplog.text


def test_an_error_that_is_not_transient_is_not_retried():
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        dispatch.after_commit(
            dispatch.Job("test.broken", broken, dispatch.Retry(backoff_s=0))
        )  # no transaction: at once
    assert calls == [1]


def test_a_detached_job_never_holds_the_committing_caller():
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(30)
        finished.set()

    with transaction.atomic():
        dispatch.after_commit(dispatch.Job("test.slow", slow, detached=True))
    # The commit returned while the job was still waiting to be released.
    assert started.wait(10) and not finished.is_set()
    release.set()
    assert finished.wait(10)


def test_with_a_broker_a_detached_job_that_cannot_be_sent_leaves_the_commit_standing(settings, monkeypatch, caplog):
    settings.CELERY_TASK_ALWAYS_EAGER = False

    def broker_down(*args, **kwargs):
        raise OSError("connection refused")

    monkeypatch.setattr(dispatch.celery_app, "send_task", broker_down)
    with transaction.atomic():
        repository = create_repository("demo")
        dispatch.after_commit(dispatch.Job("test.detached", lambda: None, detached=True))
    assert type(repository).objects.filter(name="demo").exists()  # committed, and no error raised
    assert "connection refused" in caplog.text


def test_webhook_tasks_read_their_jobs_policy():
    from repos.services import webhooks

    assert tasks.send_webhook.name == webhooks.SEND.name and tasks.pump_webhooks.name == webhooks.PUMP.name
    assert webhooks.DeliveryFailed in tasks.send_webhook.autoretry_for
    assert tasks.send_webhook.max_retries == webhooks.SEND.retry.retries >= webhooks.ATTEMPTS - 1
