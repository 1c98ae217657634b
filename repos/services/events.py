"""The outbox: events are rows written in the transaction that caused them.

Subscribers read them in ``seq`` order (monotonic per repository, no gaps), so an event exists
exactly when the change it announces committed, and a reader that resumes after an id misses
nothing and sees nothing twice.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from ..models import Event, Repository

STREAM_CREATED = "stream.created"
STREAM_INTEGRATE = "stream.integrate"
PROPOSAL_OPENED = "proposal.opened"
PROPOSAL_CONFLICT = "proposal.conflict"
REPOSITORY_CREATED = "repository.created"


def append_event(repository: Repository, kind: str, payload: dict) -> Event:
    """Record an event; must run inside the caller's transaction."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("events are written in the transaction of the change they announce")
    # The UPDATE takes the repository row's write lock until commit, so sequence numbers are
    # handed out in commit order with no gaps, on SQLite and PostgreSQL alike.
    Repository.objects.filter(pk=repository.pk).update(event_seq=F("event_seq") + 1)
    seq = Repository.objects.values_list("event_seq", flat=True).get(pk=repository.pk)
    return Event.objects.create(repository=repository, seq=seq, kind=kind, payload=payload)
