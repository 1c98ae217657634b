"""The outbox: events are rows written in the transaction that caused them, and read back in order.

Subscribers (the SSE and WebSocket feeds) read them with :func:`events_after` in ``seq`` order
(monotonic per repository, no gaps), so an event exists exactly when the change it announces
committed, and a reader that resumes after an id misses nothing and sees nothing twice. Once
committed, each event is also pushed to the server processes' relays (repos/services/relay.py),
so subscribers hear of it without asking the database.

Rows older than ``AGENTGIT["EVENT_RETENTION_S"]`` are pruned (:func:`prune`) every
``AGENTGIT["EVENT_PRUNE_EVERY_S"]``: by Celery beat where there are workers, and in the embedded
default (no beat) by the server processes themselves, after an event commits
(:func:`prune_when_due`). Resuming from before what is left is refused with the first id still
available (:func:`check_resumable`), never answered with a silent gap.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from ..errors import Invalid
from ..models import Credential, Event, Repository
from .transports import Message, publish_on_commit

logger = logging.getLogger(__name__)

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
PROPOSAL_REVIEW = "proposal.review"
POLICY_CHANGED = "policy.changed"
POLICY_BYPASS = "policy.bypass"
CHECK_REQUESTED = "check.requested"
CHECK_COMPLETED = "check.completed"

#: Every kind of event there is (what a webhook may choose).
KINDS = (
    STREAM_CREATED,
    STREAM_INTEGRATE,
    STREAM_DELETED,
    PROPOSAL_OPENED,
    PROPOSAL_CONFLICT,
    PROPOSAL_REVISED,
    PROPOSAL_CLOSED,
    PROPOSAL_REOPENED,
    PROPOSAL_RESOLVED,
    REPOSITORY_CREATED,
    PROPOSAL_REVIEW,
    POLICY_CHANGED,
    POLICY_BYPASS,
    CHECK_REQUESTED,
    CHECK_COMPLETED,
)

#: One event as both feeds send it (the WebSocket's JSON text; SSE's id, event and data lines):
#: ``{"id": seq, "event": kind, "data": payload + {"seq", "created"}}``.

#: Most changed paths an event lists; beyond, ``paths_truncated`` is true.
MAX_PATHS = 100


def events_after(repository_id: int, after: int, limit: int) -> list[Event]:
    """Up to ``limit`` of the repository's events after the id ``after``, oldest first."""
    return list(Event.objects.filter(repository_id=repository_id, seq__gt=after).order_by("seq")[:limit])


def wire(event: Event) -> Message:
    """An event as the feeds send it; ``created`` is the server's time (UTC, microseconds)."""
    created = event.created.isoformat().replace("+00:00", "Z")
    return {"id": event.seq, "event": event.kind, "data": {**event.payload, "seq": event.seq, "created": created}}


def changed_paths(paths: list[str]) -> dict[str, Any]:
    """The payload fields naming what a change touched: at most :data:`MAX_PATHS` paths."""
    return {"paths": paths[:MAX_PATHS], "paths_truncated": len(paths) > MAX_PATHS}


def author(credential: Credential | None) -> dict[str, str] | None:
    """Who did it, as events name them: the user and the credential (the agent's token name)."""
    if credential is None:
        return None
    return {"user": credential.user.username, "credential": credential.name or credential.token_prefix}


def append_event(repository: Repository, kind: str, payload: dict) -> Event:
    """Record an event; must run inside the caller's transaction. It is pushed once that commits."""
    (event,) = append_all(repository, [(kind, payload)])
    return event


def append_events(repository: Repository, kind: str, payloads: list[dict]) -> None:
    """:func:`append_event` for many events of one kind at once (a push creating thousands of
    streams): see :func:`append_all`."""
    append_all(repository, [(kind, payload) for payload in payloads])


def append_all(repository: Repository, events: list[tuple[str, dict]]) -> list[Event]:
    """:func:`append_event` for each ``(kind, payload)``, in the order given, in one statement
    (per :data:`_EVENTS_PER_STATEMENT`) whatever their number: a landing's events, a push
    creating thousands of streams. It hands out their sequence numbers from the repository's
    ``event_seq`` and advances it in the same statement (see :func:`_insert_events`)."""
    if not events:
        return []
    _require_transaction()
    created = timezone.now()
    rows = [Event(repository=repository, kind=kind, payload=payload, created=created) for kind, payload in events]
    for start in range(0, len(rows), _EVENTS_PER_STATEMENT):
        _insert_events(repository.pk, rows[start : start + _EVENTS_PER_STATEMENT])
    _announce(repository, rows)
    return rows


#: A statement's events: 4 parameters each, well under SQLite's 32 766.
_EVENTS_PER_STATEMENT = 1000


def _insert_events(repository_id: int, rows: list[Event]) -> None:
    """Insert ``rows`` numbered after the repository's ``event_seq``, which they advance, in one
    statement; their ids and numbers are set on them.

    The repository row is written in that statement, so its write lock is held until commit:
    sequence numbers are handed out in commit order with no gaps. PostgreSQL: the statement
    updates the row (``WITH ... UPDATE ... RETURNING``, the row lock) and inserts the events from
    the number it returns. SQLite, which has no data-modifying WITH: the insert reads the
    number (one writer at a time holds the database), and the trigger ``repos_event_advances_seq``
    (migration 0014) advances ``event_seq`` with each row.
    """
    connection = transaction.get_connection()
    values = []
    for number, row in enumerate(rows, start=1):
        values += [number, *(field.get_db_prep_save(getattr(row, field.attname), connection) for field in _FIELDS)]
    if connection.vendor == "postgresql":
        params = [len(rows), repository_id, repository_id, len(rows), *values]
    else:
        params = [repository_id, repository_id, *values]
    with connection.cursor() as cursor:
        cursor.execute(_sql(connection.vendor, len(rows)), params)
        ids = {seq: pk for pk, seq in cursor.fetchall()}
    for seq, row in enumerate(rows, start=min(ids)):  # each row is numbered after the last, in order
        row.seq, row.pk = seq, ids[seq]
        row._state.adding = False
        row._state.db = connection.alias


#: The columns an event's statement writes after its number (``created`` set by the caller).
_FIELDS = [field for field in Event._meta.concrete_fields if field.name in ("kind", "payload", "created")]


def _sql(vendor: str, count: int) -> str:
    table, repositories = Event._meta.db_table, Repository._meta.db_table
    columns = "(repository_id, seq, kind, payload, created)"
    if vendor == "postgresql":
        rows = ", ".join(["(%s::integer, %s::varchar, %s::jsonb, %s::timestamptz)"] * count)
        return (
            f"WITH bumped AS (UPDATE {repositories} SET event_seq = event_seq + %s WHERE id = %s RETURNING event_seq) "
            f"INSERT INTO {table} {columns} "
            f"SELECT %s, bumped.event_seq - %s + new.column1, new.column2, new.column3, new.column4 "
            f"FROM bumped, (VALUES {rows}) AS new RETURNING id, seq"
        )
    rows = ", ".join(["(%s, %s, %s, %s)"] * count)
    # An uncorrelated subquery is read once, before any row (and its trigger) is written.
    return (
        f"INSERT INTO {table} {columns} "
        f"SELECT %s, (SELECT event_seq FROM {repositories} WHERE id = %s) + new.column1, "
        f"new.column2, new.column3, new.column4 FROM (VALUES {rows}) AS new RETURNING id, seq"
    )


def _require_transaction() -> None:
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("events are written in the transaction of the change they announce")


def _announce(repository: Repository, events: list[Event]) -> None:
    """What follows the rows of new events: each is pushed to the relays, and the repository's
    webhooks are fed, once the transaction commits."""
    for event in events:
        publish_on_commit(repository.pk, wire(event))
    if repository.webhooks:  # read with the repository's row: no query where there are none
        from .webhooks import deliver_on_commit  # webhooks read the outbox through this module

        deliver_on_commit(repository.pk)
    if settings.CELERY_TASK_ALWAYS_EAGER:  # no workers, so no beat: this process prunes
        transaction.on_commit(prune_when_due)


def resume_after(last_event_id: str | None, after: str | None) -> int:
    """The last event id a subscriber has: the ``Last-Event-ID`` header (it wins; what
    EventSource sends when it reconnects) or ``?after=``; 0 when neither. Both are checked when
    both are sent (400 ``invalid``)."""
    header = _event_id(last_event_id, empty_is_absent=False)
    query = _event_id(after, empty_is_absent=True)
    return header if header is not None else query or 0


def _event_id(raw: str | None, *, empty_is_absent: bool) -> int | None:
    # ``?after=`` sent empty is not sent (as every optional query parameter); an empty
    # Last-Event-ID is malformed (EventSource sends the header only when it has an id).
    if raw is None or (raw == "" and empty_is_absent):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise Invalid(f"an event id is a whole number, not {raw!r}") from None
    if value < 0:
        raise Invalid(f"an event id is not negative: {value}")
    return value


def check_resumable(repository: Repository, after: int) -> None:
    """Refuse to resume after ``after`` when events after it were pruned (400 ``invalid``, with
    the first id still available), rather than skip them silently. One indexed lookup."""
    if after <= 0:  # not resuming: from the first event still kept
        return
    first = Event.objects.filter(repository=repository).order_by("seq").values_list("seq", flat=True).first()
    if first is None:  # everything pruned: history starts after the last id handed out
        first = repository.event_seq + 1
    if after < first - 1:
        message = f"events before {first} were pruned; resume after {first - 1} or later"
        raise Invalid(message, details=[{"code": "pruned", "message": message, "first_available": first}])


def prune(older_than_s: float | None = None) -> int:
    """Delete the events older than the retention age; returns how many. The newest event of
    each repository is kept, so the first available id is always read from the outbox."""
    age = settings.AGENTGIT["EVENT_RETENTION_S"] if older_than_s is None else older_than_s
    cutoff = timezone.now() - timedelta(seconds=age)
    deleted = 0
    for repository_id, last in Repository.objects.filter(event_seq__gt=1).values_list("pk", "event_seq"):
        count, _ = Event.objects.filter(repository_id=repository_id, created__lt=cutoff, seq__lt=last).delete()
        deleted += count
    return deleted


_last_pruned: float | None = None  # this process's last prune (time.monotonic()); None: none yet
_pruning = threading.Lock()


def prune_when_due() -> None:
    """The embedded default's schedule (there is no beat without workers): prune, on a thread of
    its own, if this process has not in the last ``AGENTGIT["EVENT_PRUNE_EVERY_S"]`` seconds.
    Called after each event commits, so a server that writes keeps its outbox pruned, and one
    that writes nothing has nothing new to prune. A clock comparison when not due."""
    global _last_pruned
    now = time.monotonic()
    with _pruning:
        if _last_pruned is not None and now - _last_pruned < settings.AGENTGIT["EVENT_PRUNE_EVERY_S"]:
            return
        _last_pruned = now
    threading.Thread(target=_prune_here, name="event-pruner", daemon=True).start()


def _prune_here() -> None:
    try:
        deleted = prune()
        if deleted:
            logger.info("pruned %d events older than %d s", deleted, settings.AGENTGIT["EVENT_RETENTION_S"])
    except Exception:  # the next due prune tries again
        logger.warning("pruning the outbox failed", exc_info=True)
    finally:
        connection.close()  # this thread's own


def outbox_span() -> int:
    """How many events the outbox holds, from the indexes: per repository, its last id handed
    out minus its first id kept (ids are gapless and pruned oldest first), never a row count."""
    first = Event.objects.filter(repository=OuterRef("pk")).order_by("seq").values("seq")[:1]
    spans = Repository.objects.annotate(first=Subquery(first)).values_list("event_seq", "first")
    return sum(last - first + 1 for last, first in spans if first is not None)
