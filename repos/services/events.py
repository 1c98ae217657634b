"""The outbox: events are rows written in the transaction that caused them, and read back in order.

Subscribers (the API's SSE and WebSocket feeds, the web UI's activity feed) read them through
:class:`EventFeed` (:func:`events_after`) in ``seq`` order (monotonic per repository, no gaps), so
an event exists exactly when the change it announces committed, and a reader that resumes after
an id misses nothing and sees nothing twice.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.db import transaction

from ..models import Event, Repository
from . import metrics

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


# ------------------------------------------------------------------------------ feeds

POLL_S = 0.1
KEEPALIVE_S = 15.0
DEFAULT_TIMEOUT_S = 25.0
MAX_TIMEOUT_S = 300.0
#: Most events read per query.
BATCH = 500
KEEPALIVE = b": keep-alive\n\n"


def event_data(event: Event) -> dict:
    """An event's data as both feeds send it: its payload plus ``seq`` and ``created``."""
    return {**event.payload, "seq": event.seq, "created": event.created.isoformat().replace("+00:00", "Z")}


def encode(event: Event) -> bytes:
    """One event in the SSE wire format."""
    text = json.dumps(event_data(event), separators=(",", ":"), default=str)
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {text}\n\n".encode()


class EventFeed:
    """The events of one repository after ``after``, polled until ``timeout_s`` has passed."""

    def __init__(self, repository_id: int, after: int, timeout_s: float) -> None:
        self.repository_id = repository_id
        self.after = after
        now = time.monotonic()
        self.deadline = now + timeout_s
        self.quiet_since = now

    def fetch(self) -> list[Event]:
        return events_after(self.repository_id, self.after, BATCH)

    def step(self, events: list[Event]) -> tuple[bytes, float | None]:
        """After a fetch: the bytes to send, and the pause before the next fetch (None: the end)."""
        now = time.monotonic()
        if events:
            self.after = events[-1].seq
            self.quiet_since = now
            metrics.observe_relayed(event.created for event in events)
            return b"".join(encode(event) for event in events), 0.0
        if now >= self.deadline:
            return b"", None
        chunk = b""
        if now - self.quiet_since >= KEEPALIVE_S:
            chunk, self.quiet_since = KEEPALIVE, now
        return chunk, min(POLL_S, self.deadline - now)

    def synchronous(self) -> Iterator[bytes]:
        while True:
            chunk, pause = self.step(self.fetch())
            if chunk:
                yield chunk
            if pause is None:
                return
            time.sleep(pause)

    async def asynchronous(self) -> AsyncIterator[bytes]:
        fetch = sync_to_async(self.fetch)  # thread-sensitive: the request's own thread and connection
        while True:
            chunk, pause = self.step(await fetch())
            if chunk:
                yield chunk
            if pause is None:
                return
            await asyncio.sleep(pause)
