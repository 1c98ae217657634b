"""The outbox: events are rows written in the transaction that caused them, and read back in order.

Subscribers (the SSE and WebSocket feeds) read them with :func:`events_after` in ``seq`` order
(monotonic per repository, no gaps), so an event exists exactly when the change it announces
committed, and a reader that resumes after an id misses nothing and sees nothing twice.
"""

from __future__ import annotations

from django.db import transaction

from ..models import Event, Repository

STREAM_CREATED = "stream.created"
STREAM_INTEGRATE = "stream.integrate"
STREAM_DELETED = "stream.deleted"
PROPOSAL_OPENED = "proposal.opened"
PROPOSAL_CONFLICT = "proposal.conflict"
PROPOSAL_REVISED = "proposal.revised"
PROPOSAL_CLOSED = "proposal.closed"
PROPOSAL_REOPENED = "proposal.reopened"
PROPOSAL_RESOLVED = "proposal.resolved"
REPOSITORY_CREATED = "repository.created"


def events_after(repository_id: int, after: int, limit: int) -> list[Event]:
    """Up to ``limit`` of the repository's events after the id ``after``, oldest first."""
    return list(Event.objects.filter(repository_id=repository_id, seq__gt=after).order_by("seq")[:limit])


def append_event(repository: Repository, kind: str, payload: dict) -> Event:
    """Record an event; must run inside the caller's transaction."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("events are written in the transaction of the change they announce")
    # The UPDATE takes the repository row's write lock until commit, so sequence numbers are
    # handed out in commit order with no gaps, on SQLite and PostgreSQL alike. RETURNING (SQLite
    # 3.35+, PostgreSQL) reads the new number in the same statement.
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(_NEXT_SEQ, [repository.pk])
        (seq,) = cursor.fetchone()
    return Event.objects.create(repository=repository, seq=seq, kind=kind, payload=payload)


_NEXT_SEQ = f"UPDATE {Repository._meta.db_table} SET event_seq = event_seq + 1 WHERE id = %s RETURNING event_seq"
