"""Landing in one call: build a changeset, open a proposal for it and ask to integrate it.

The same three services as the separate endpoints (content, proposals, integration), in one
transaction: a refused changeset or an unknown stream leaves no proposal behind, and the
integration goes through the landing queue like every other. The caller waits for the
operation as the integrate endpoint does.

The transaction takes the landing's lock of the stream first (its read of the head is the
landing's, the repository read with it) and lands in the same transaction, handed what the
request wrote for it rather than reading it back (``integration.Held``); when it fast-forwards
it writes the proposal, its revision and its operation once, landed (docs/adr/0022, 0024).
Without workers always; with workers when the stream's row is free, nothing is queued on it
and it requires no checks (docs/adr/0026). Otherwise the operation waits in the queue and a
worker lands it after the commit.
"""

from __future__ import annotations

from typing import NamedTuple

from django.db import transaction

from ..errors import Invalid
from ..models import Changeset, Credential, Operation, Proposal, Repository
from . import content, integration, proposals, refmirror
from .credentials import require_stream
from .dispatch import jobs_run_in_process
from .opening import Opening
from .repositories import get_repository, get_stream

#: ``parent`` when the request has none: the stream's head.
STREAM_HEAD = object()
#: A proposal's title is at most this long; a landing's is its message's first line.
_TITLE_LENGTH = 300


class Landing(NamedTuple):
    changeset: Changeset
    proposal: Proposal
    operation: Operation


def land(
    repository: Repository | str,
    stream: str,
    *,
    parent: object = STREAM_HEAD,
    message: object,
    operations: object,
    provenance: object,
    credential: Credential | None,
) -> Landing:
    """Write the changeset (on ``parent``, by default the stream's head), propose it on
    ``stream`` and queue its integration; nothing is written if any step is refused. Without
    workers the operation comes back landed (done or failed), unless it waits in the queue.

    ``repository``: the repository, or its name (the land view's: without workers it is read
    with the stream's locked row; NotFound as ``get_repository``)."""
    require_stream(credential, stream)  # before the changeset's objects are written, not after
    given: str | None = None
    if parent is not STREAM_HEAD:
        if parent is not None and not isinstance(parent, str):
            raise Invalid("parent is a revision (a changeset id or a stream name) or null")
        given = parent
    if not isinstance(message, str):
        raise Invalid("message must be a string")
    provenance = {} if provenance is None else provenance
    if not isinstance(provenance, dict):
        raise Invalid("provenance must be an object")
    workers = not jobs_run_in_process()
    with transaction.atomic():
        # The stream's row is locked first, so the head read here is the one the landing below
        # lands on, and nothing can queue before this request's operation; the repository is
        # read with it. With workers, only if no one holds it now, and the request lands here
        # only what it alone queues on a stream without checks: it never waits for another
        # landing, it queues behind it.
        locked = integration.lock_stream(_name(repository), stream, unless_busy=workers)
        held = locked if locked is not None and (not workers or integration.may_land_held(locked)) else None
        if locked is not None:
            target, found = locked.stream, locked.stream.repository
        else:  # another transaction lands the stream now: read, not locked
            found = get_repository(repository) if isinstance(repository, str) else repository
            target = get_stream(found, stream)
        changeset = content.create_changeset(
            found,
            parent=target.head if parent is STREAM_HEAD else given,
            operations=operations,
            message=message,
            provenance=provenance,
            credential=credential,
            protect=held is None,
        )
        title = (message.strip().splitlines() or [""])[0][:_TITLE_LENGTH]
        if held is None:
            # A changeset just recorded: the ref mirror protects it already.
            proposal = proposals.open_on(found, target, changeset.commit_id, title, credential, recorded=True)
            return Landing(changeset, proposal, integration.queue_opened(proposal))
        # Land in this transaction, so the changeset, the proposal and their landing are one
        # commit (one fsync of the database, not two; with workers, no round trip through the
        # broker either), as a worker would land it right after ours committed (docs/adr/0015,
        # 0026). Nothing of the proposal is written yet: the landing writes it, its revision and
        # its operation, in their final state when it lands them at once (docs/adr/0024).
        opening = Opening.of(found, target, changeset.commit_id, title, credential)
        held.operation, held.opening = integration.new_operation(opening.proposal), opening
        held.fast_forward = target.head is None or target.head in changeset.parents
        integration.land_stream(target.pk, held)
        if opening.proposal.state != Proposal.State.INTEGRATED:
            # Conflicted, refused or still queued: no stream names the changeset, so its own ref
            # must (it had none: a landing that lands it needs none, two ref files fewer,
            # docs/adr/0028).
            commit_id = changeset.commit_id
            transaction.on_commit(lambda: refmirror.protect_changeset(found.name, commit_id))
    return Landing(changeset, opening.proposal, held.operation)


def _name(repository: Repository | str) -> str:
    return repository if isinstance(repository, str) else repository.name
