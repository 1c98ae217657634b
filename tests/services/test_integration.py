"""The integration service on the embedded default: the landing queue, outcomes, recovery.

``transaction=True``: integrations land on commit (Celery eager), which the rollback-wrapped
tests of pytest-django would never reach.
"""

from __future__ import annotations

import threading

import pytest
from django.db.models import F

from repos.models import Event, Proposal, Stream
from repos.services import integration
from repos.services.content import create_changeset
from repos.services.proposals import open_proposal
from repos.services.repositories import create_repository
from repos.services.stores import store_for

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = "".join(f"line {i}\n" for i in range(1, 11))


def write(repository, parent, files, message="change"):
    ops = [{"op": "write", "path": path, "content": text} for path, text in files.items()]
    return create_changeset(
        repository, parent=parent, operations=ops, message=message, provenance={"agent": "t"}, credential=None
    ).commit_id


def land(repository, head, stream="main"):
    proposal = open_proposal(repository, stream=stream, head=head)
    operation = integration.request_integration(proposal)
    operation.refresh_from_db()
    return operation


def test_proposals_land_in_order_as_fast_forward_then_merge():
    repository = create_repository("demo")
    base = write(repository, None, {"a.txt": "a\n", "f.txt": TEXT})
    assert land(repository, base).outcome["outcome"] == "fast_forward"
    one = write(repository, base, {"f.txt": TEXT.replace("line 2", "two")})
    two = write(repository, base, {"f.txt": TEXT.replace("line 9", "nine")})
    assert land(repository, one).outcome["outcome"] == "fast_forward"
    merged = land(repository, two)
    assert merged.state == "done" and merged.outcome["outcome"] == "merge"
    head = Stream.objects.get(repository=repository, name="main").head
    assert head == merged.outcome["stream_head"]
    store = store_for("demo")
    assert store.read_commit(head).parents == (one, two)
    kinds = list(Event.objects.filter(repository=repository).values_list("kind", flat=True))
    assert kinds.count("stream.integrate") == 3
    seqs = list(Event.objects.filter(repository=repository).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_conflict_leaves_the_stream_and_integrating_again_gives_the_same_answer():
    repository = create_repository("demo")
    base = write(repository, None, {"f.txt": TEXT})
    land(repository, base)
    ours = write(repository, base, {"f.txt": TEXT.replace("line 5", "ours")})
    theirs = write(repository, base, {"f.txt": TEXT.replace("line 5", "theirs")})
    land(repository, ours)
    proposal = open_proposal(repository, stream="main", head=theirs)
    first = integration.request_integration(proposal)
    first.refresh_from_db()
    assert first.outcome["outcome"] == "conflict"
    assert first.outcome["conflicts"] == [{"path": "f.txt", "kind": "content"}]
    assert Stream.objects.get(repository=repository).head == ours
    proposal.refresh_from_db()
    assert proposal.state == Proposal.State.CONFLICTED
    again = integration.request_integration(proposal)
    assert again.pk == first.pk and again.outcome == first.outcome
    assert Event.objects.filter(kind="proposal.conflict").count() == 1


def test_operations_left_queued_by_a_crash_are_landed_once_by_recovery(monkeypatch, stream_busy):
    repository = create_repository("demo")
    base = write(repository, None, {"a.txt": "a\n"})
    # A crash before the landing: the operation is recorded, nothing else happened.
    monkeypatch.setattr(integration, "_enqueue_on_commit", lambda stream_id: None)
    proposal = open_proposal(repository, stream="main", head=base)
    operation = integration.request_integration(proposal)
    assert operation.state == "queued" and Stream.objects.get(repository=repository).head is None
    assert integration.recover().landed == 1
    assert integration.recover().landed == 0
    operation.refresh_from_db()
    assert operation.state == "done" and Stream.objects.get(repository=repository).head == base
    assert Event.objects.filter(kind="stream.integrate").count() == 1


def test_asking_again_lands_an_operation_whose_landing_was_lost(monkeypatch, stream_busy):
    repository = create_repository("demo")
    base = write(repository, None, {"a.txt": "a\n"})
    proposal = open_proposal(repository, stream="main", head=base)
    with monkeypatch.context() as lost:  # the landing after the first request never ran
        lost.setattr(integration, "_enqueue_on_commit", lambda stream_id: None)
        first = integration.request_integration(proposal)
    assert first.state == "queued"
    again = integration.request_integration(proposal)  # the agent retries
    assert again.pk == first.pk
    again.refresh_from_db()
    assert again.state == "done" and Stream.objects.get(repository=repository).head == base


def test_a_head_moved_behind_the_lock_is_retried_then_aborted_leaving_the_proposal_open(monkeypatch, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "INTEGRATE_ATTEMPTS": 3, "INTEGRATE_BACKOFF_MS": 1}
    repository = create_repository("demo")
    base = write(repository, None, {"a.txt": "a\n"})
    compare_and_swap = integration._MOVE_HEAD.run

    def lost_race(head, updated, stream_id, version):  # every compare-and-swap finds the version moved
        Stream.objects.filter(pk=stream_id).update(version=F("version") + 1)  # by a writer without the lock
        return compare_and_swap(head, updated, stream_id, version)

    monkeypatch.setattr(integration._MOVE_HEAD, "run", lost_race)
    operation = land(repository, base)
    assert operation.state == "failed" and operation.error["code"] == "aborted" and operation.error["retryable"]
    assert operation.attempts == 3
    proposal = Proposal.objects.get()
    assert proposal.state == Proposal.State.OPEN
    assert Stream.objects.get(repository=repository).head is None
    assert not Event.objects.filter(kind="stream.integrate").exists()


def test_the_retry_wait_is_bounded_spread_and_deterministic():
    waits = [integration.backoff_ms(7, attempt, 32) for attempt in range(1, 25)]
    assert waits[0] == 0 and all(0 < w <= 32 for w in waits[1:])
    assert waits == [integration.backoff_ms(7, attempt, 32) for attempt in range(1, 25)]
    assert integration.backoff_ms(7, 9, 32) != integration.backoff_ms(8, 9, 32)


def test_a_landing_asked_for_while_another_thread_lands_the_stream_is_landed_by_that_thread(monkeypatch, stream_busy):
    """Calls to land one stream coalesce in a process: the second returns at once, and the thread
    at work looks at the queue once more before it stops, so what was queued meanwhile lands."""
    repository = create_repository("demo")
    base = write(repository, None, {"a.txt": "a\n"})
    land(repository, base)
    first = open_proposal(repository, stream="main", head=write(repository, base, {"b.txt": "b\n"}))
    second = open_proposal(repository, stream="main", head=write(repository, base, {"c.txt": "c\n"}))
    stream = Stream.objects.get(repository=repository, name="main").pk
    real_pass, passes = integration._land_batch, []
    between_passes, go_on = threading.Event(), threading.Event()

    def pass_then_pause(stream_id, *held):
        result = real_pass(stream_id, *held)
        passes.append(result)
        if len(passes) == 1:  # after the first pass has committed: hold the thread "at work"
            between_passes.set()
            assert go_on.wait(30)
        return result

    monkeypatch.setattr(integration, "_land_batch", pass_then_pause)
    monkeypatch.setattr(integration, "_enqueue_on_commit", lambda stream_id: None)  # landings asked below
    integration.request_integration(first)
    at_work = threading.Thread(target=integration.land_stream, args=(stream,))
    at_work.start()
    assert between_passes.wait(30)
    integration.request_integration(second)  # queued while the first thread is at work
    assert integration.land_stream(stream) == 0  # coalesced: left to the thread at work
    go_on.set()
    at_work.join(30)

    assert not at_work.is_alive() and len(passes) == 2
    for proposal in (first, second):
        proposal.refresh_from_db()
        assert proposal.state == Proposal.State.INTEGRATED
    assert integration.land_stream(stream) == 0 and len(passes) == 3  # nothing left, not at work
