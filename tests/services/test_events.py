"""The outbox's numbering: events written in one statement (repos/services/events.py)."""

from __future__ import annotations

import pytest
from django.db import transaction

from repos.models import Event, Repository
from repos.services.events import append_all, append_event
from repos.services.repositories import create_repository

pytestmark = pytest.mark.django_db(transaction=True)


def test_events_are_numbered_in_order_after_the_last_and_the_repository_follows():
    # Given a repository with its first events
    repository = create_repository("numbered")
    last = Repository.objects.get(pk=repository.pk).event_seq

    # When one event, then a landing's three, then more than one statement holds are written
    with transaction.atomic():
        one = append_event(repository, "stream.created", {"n": 0})
        three = append_all(repository, [("stream.integrate", {"n": n}) for n in (1, 2, 3)])
    with transaction.atomic():
        many = append_all(repository, [("stream.created", {"n": n}) for n in range(4, 2504)])

    # Then they are numbered one after the other, in the order given, each row as returned
    written = [one, *three, *many]
    assert [event.seq for event in written] == list(range(last + 1, last + 2505))
    stored = Event.objects.filter(repository=repository, seq__gt=last).order_by("seq")
    assert list(stored.values_list("id", "seq", "payload__n")) == [(e.pk, e.seq, e.payload["n"]) for e in written]
    assert Repository.objects.get(pk=repository.pk).event_seq == last + 2504

    # And the next event follows them
    with transaction.atomic():
        assert append_event(repository, "stream.deleted", {}).seq == last + 2505
